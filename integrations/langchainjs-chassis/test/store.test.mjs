// ChassisVectorStore for LangChain.js: the behaviours LangChain's standard vector-store suite
// checks (no published package of that suite installs from npm here, so they are restated),
// filters, scores, MMR, retrievers, ids, persistence, keyword and hybrid search, and a file
// shared with the Python store.
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { test } from 'node:test'

import { Document } from '@langchain/core/documents'
import { Embeddings } from '@langchain/core/embeddings'

import { ChassisVectorStore, chassisId } from '../src/index.js'

/** Text "i ..." is the unit vector at angle i degrees. */
class Axis extends Embeddings {
  constructor() {
    super({})
  }
  one(t) {
    const a = (Number.parseFloat(t.split(' ')[0]) * Math.PI) / 180
    return [Math.cos(a), Math.sin(a), 0]
  }
  async embedDocuments(texts) {
    return texts.map((t) => this.one(t))
  }
  async embedQuery(t) {
    return this.one(t)
  }
}

function tmp(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'chassis-lc-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

const contents = (docs) => docs.map((d) => d.pageContent)

test('the standard behaviours: add, search, ids, replace, delete, get by ids', async (t) => {
  const store = new ChassisVectorStore(new Axis(), { path: path.join(tmp(t), 's.chassis') })
  assert.deepEqual(await store.similaritySearch('0', 1), [], 'an empty store finds nothing')
  const ids = await store.addDocuments([new Document({ pageContent: '0 foo', metadata: { id: 1 } }), new Document({ pageContent: '10 bar', metadata: { id: 2 } })])
  assert.equal(ids.length, 2)
  const found = await store.similaritySearch('0', 2)
  assert.deepEqual(contents(found), ['0 foo', '10 bar'])
  assert.deepEqual(found[0].metadata, { id: 1 })
  assert.equal(found[0].id, ids[0])
  // Given ids are kept; a document under a stored id replaces it.
  await store.addDocuments([new Document({ pageContent: '20 baz' })], { ids: ['x'] })
  await store.addDocuments([new Document({ pageContent: '30 qux', id: 'x' })])
  const got = await store.getByIds(['x', 'missing', ids[1]])
  assert.deepEqual(contents(got), ['30 qux', '10 bar'])
  await store.delete({ ids: [ids[0], 'never-stored'] })
  assert.deepEqual(contents(await store.similaritySearch('0', 5)), ['10 bar', '30 qux'])
  // Scores are distances (1 - cos): 0 for the same direction.
  const [[d, s]] = await store.similaritySearchWithScore('10', 1)
  assert.equal(d.pageContent, '10 bar')
  assert.ok(Math.abs(s) < 1e-6)
  assert.equal(chassisId('x'), chassisId('x'))
  store.close()
})

test('filters, MMR, retrievers and persistence', async (t) => {
  const file = path.join(tmp(t), 'f.chassis')
  const texts = Array.from({ length: 18 }, (_, i) => String(i * 5))
  const metas = texts.map((_, j) => ({ even: (j * 5) % 10 === 0, tens: Math.floor((j * 5) / 10), tags: j * 5 < 30 ? ['a'] : ['b'] }))
  const store = await ChassisVectorStore.fromTexts(texts, metas, new Axis(), { path: file })
  assert.deepEqual(contents(await store.similaritySearch('0', 3, { even: true })), ['0', '10', '20'])
  assert.deepEqual(contents(await store.similaritySearch('0', 2, { $and: [{ tags: { $contains: 'b' } }, { even: false }] })), ['35', '45'])
  const retriever = store.asRetriever({ k: 2, filter: { tens: { $in: [4] } } })
  assert.deepEqual(contents(await retriever.invoke('0')), ['40', '45'])
  await assert.rejects(store.similaritySearch('0', 1, { tens: { $regex: 'x' } }))
  const mmrStore = new ChassisVectorStore(new Axis(), { path: path.join(path.dirname(file), 'm.chassis') })
  await mmrStore.addDocuments(['0', '1', '2', '45', '90'].map((p) => new Document({ pageContent: p })))
  const mmr = await mmrStore.maxMarginalRelevanceSearch('20', { k: 2, fetchK: 5, lambda: 0.7 })
  assert.deepEqual(contents(mmr), ['2', '45'])
  const mmrRetriever = mmrStore.asRetriever({ searchType: 'mmr', k: 2, searchKwargs: { fetchK: 5, lambda: 0.7 } })
  assert.deepEqual(contents(await mmrRetriever.invoke('20')), ['2', '45'])
  store.close()
  mmrStore.close()
  // Reopened, and read-only beside a writer.
  const again = new ChassisVectorStore(new Axis(), { path: file })
  assert.equal(again.index.size, 18)
  const reader = new ChassisVectorStore(new Axis(), { path: file, readOnly: true })
  assert.deepEqual(contents(await reader.similaritySearch('44', 1)), ['45'])
  await assert.rejects(reader.addDocuments([new Document({ pageContent: '1' })]), /read/i)
  reader.close()
  again.close()
})

test('keyword and hybrid search over the same file', async (t) => {
  const store = new ChassisVectorStore(new Axis(), { path: path.join(tmp(t), 'k.chassis') })
  const texts = ['0 rust parser', '10 python web framework', '20 rust web server', '80 python parser', '85 json']
  await store.addDocuments(texts.map((p, i) => new Document({ pageContent: p, metadata: { n: i }, id: `d${i}` })))
  assert.deepEqual(new Set(contents(await store.keywordSearch('parser', 5))), new Set(['0 rust parser', '80 python parser']))
  const scored = await store.keywordSearchWithScore('rust web', 5)
  assert.equal(scored[0][0].pageContent, '20 rust web server')
  assert.deepEqual(contents(await store.keywordSearch('parser', 5, { n: { $gt: 1 } })), ['80 python parser'])
  const hybrid = await store.hybridSearch('84 parser', 2)
  assert.equal(hybrid[0].pageContent, '80 python parser')
  const rel = await store.hybridSearchWithScore('84 parser', 2, undefined, { fusion: 'relative_score', weights: [0.5, 0.5] })
  assert.equal(rel[0][0].id, 'd3')
  await store.delete({ ids: ['d3'] })
  assert.deepEqual(contents(await store.keywordSearch('parser', 5)), ['0 rust parser'])
  const plain = new ChassisVectorStore(new Axis(), { path: path.join(tmp(t), 'p.chassis'), fullText: false })
  await plain.addDocuments([new Document({ pageContent: '0 alpha' })])
  await assert.rejects(plain.keywordSearch('alpha'), /enableFullText/)
  await plain.enableFullText()
  assert.deepEqual(contents(await plain.keywordSearch('alpha')), ['0 alpha'])
  plain.close()
  store.close()
})

// A file written by this store opens in the Python store, and the reverse (same ids, texts,
// metadata). Needs a Python with chassis and langchain-chassis: $CHASSIS_PYTHON, else the
// repository's target/py-venv; scripts/test sets CHASSIS_REQUIRE_PYTHON=1.
function python() {
  const root = path.resolve(new URL('.', import.meta.url).pathname, '../../..')
  for (const p of [process.env.CHASSIS_PYTHON, path.join(root, 'target/py-venv/bin/python')]) {
    if (!p || !fs.existsSync(p)) continue
    try {
      execFileSync(p, ['-c', 'import langchain_chassis'], { stdio: 'ignore' })
      return p
    } catch {}
  }
  return null
}
const py = python()

test('a file shared with the Python store', { skip: !py && process.env.CHASSIS_REQUIRE_PYTHON !== '1' && 'no Python with langchain-chassis' }, async (t) => {
  assert.ok(py, 'a Python with langchain-chassis')
  const dir = tmp(t)
  const file = path.join(dir, 'shared.chassis')
  const store = new ChassisVectorStore(new Axis(), { path: file })
  await store.addDocuments([new Document({ pageContent: '10 from node', metadata: { lang: 'js' }, id: 'node-1' })])
  store.close()
  const axis = `
import math
from langchain_core.embeddings import Embeddings
class Axis(Embeddings):
    def _one(self, t):
        a = math.radians(float(t.split()[0])); return [math.cos(a), math.sin(a), 0.0]
    def embed_documents(self, ts): return [self._one(t) for t in ts]
    def embed_query(self, t): return self._one(t)
`
  const out = execFileSync(py, ['-c', axis + `
import json, sys
from langchain_core.documents import Document
from langchain_chassis import ChassisVectorStore
s = ChassisVectorStore(Axis(), sys.argv[1])
d = s.get_by_ids(["node-1"])[0]
s.add_documents([Document(page_content="50 from python", metadata={"lang": "py"}, id="py-1")])
hits = s.keyword_search("python", k=2)
print(json.dumps({"text": d.page_content, "meta": d.metadata, "hits": [h.id for h in hits]}))
s.close()
`, file], { encoding: 'utf8' })
  const seen = JSON.parse(out)
  assert.deepEqual(seen, { text: '10 from node', meta: { lang: 'js' }, hits: ['py-1'] })
  const back = new ChassisVectorStore(new Axis(), { path: file, readOnly: true })
  const [doc] = await back.getByIds(['py-1'])
  assert.equal(doc.pageContent, '50 from python')
  assert.deepEqual(doc.metadata, { lang: 'py' })
  assert.deepEqual(contents(await back.similaritySearch('45', 1)), ['50 from python'])
  back.close()
})
