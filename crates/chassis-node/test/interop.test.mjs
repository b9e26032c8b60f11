// A file written from Node is read by Python, and one written by Python is read by Node:
// the same vectors, ids, metadata, text index and search answers. Needs a Python with the
// `chassis` package: $CHASSIS_PYTHON, else the repository's target/py-venv (scripts/test
// builds it first and sets CHASSIS_REQUIRE_PYTHON=1, so there the test can't be skipped).
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { test } from 'node:test'

import { Index } from '../index.mjs'
import { ROOT, clustered, tmpdir } from './helpers.mjs'

function python() {
  const candidates = [process.env.CHASSIS_PYTHON, path.join(ROOT, 'target/py-venv/bin/python')]
  for (const p of candidates) {
    if (!p || !fs.existsSync(p)) continue
    try {
      execFileSync(p, ['-c', 'import chassis'], { stdio: 'ignore' })
      return p
    } catch {}
  }
  return null
}

const py = python()
const skip = !py && process.env.CHASSIS_REQUIRE_PYTHON !== '1' ? 'no Python with chassis (set CHASSIS_PYTHON)' : false

test('Node writes, Python reads; Python writes, Node reads', { skip }, async (t) => {
  assert.ok(py, 'a Python with the chassis package (CHASSIS_REQUIRE_PYTHON=1)')
  const dir = tmpdir(t)
  const dims = 12
  const data = clustered(300, dims, 21)
  const fromNode = path.join(dir, 'node.chassis')
  const ix = await Index.create(fromNode, { dims, metric: 'cosine', textFields: ['text'] })
  await ix.add(data, {
    ids: Array.from({ length: 300 }, (_, i) => 10n ** 15n + BigInt(i)),
    metadata: Array.from({ length: 300 }, (_, i) => ({ text: i % 3 ? 'vector search' : 'json parser', n: i })),
  })
  await ix.delete([10n ** 15n + 7n])
  ix.userVersion = 77n
  await ix.flush()
  const mine = await ix.search(data.subarray(0, dims), { k: 5 })
  const myText = await ix.searchText('parser', { k: 5 })
  ix.close()
  const out = execFileSync(py, ['-c', `
import json, sys, numpy as np, chassis
ix = chassis.Index.open(sys.argv[1], read_only=True)
q = np.array(json.loads(sys.argv[2]), dtype=np.float32)
ids, _ = ix.search(q, k=5)
t, _ = ix.search_text("parser", k=5)
print(json.dumps({"len": len(ix), "ids": [str(i) for i in ids[0]], "text": [str(i) for i in t[0]],
                  "meta": ix.get_metadata(10**15 + 3), "uv": ix.user_version,
                  "fields": [f["name"] for f in ix.text_fields]}))
`, fromNode, JSON.stringify(Array.from(data.subarray(0, dims)))])
  const seen = JSON.parse(out)
  assert.equal(seen.len, 299)
  assert.deepEqual(seen.ids, [...mine.ids].map(String))
  assert.deepEqual(seen.text, [...myText.ids].map(String))
  assert.deepEqual(seen.meta, { n: 3, text: 'json parser' })
  assert.equal(seen.uv, 77)
  assert.deepEqual(seen.fields, ['text'])

  const fromPython = path.join(dir, 'python.chassis')
  execFileSync(py, ['-c', `
import sys, numpy as np, chassis
rng = np.random.default_rng(5)
with chassis.Index.create(sys.argv[1], dims=6, metric="l2", text_fields=["body"]) as ix:
    ix.add(rng.normal(size=(50, 6)).astype(np.float32), ids=list(range(100, 150)),
           metadata=[{"body": "python wrote this", "i": i} for i in range(50)])
    ix.delete([101])
`, fromPython])
  const r = await Index.open(fromPython, { readOnly: true })
  assert.equal(r.size, 49)
  assert.deepEqual(r.getMetadata(120n), { body: 'python wrote this', i: 20 })
  assert.equal((await r.searchText('python', { k: 100 })).ids.filter((id) => id !== 2n ** 64n - 1n).length, 49)
  const w = await Index.open(fromPython)
  await w.add(new Float32Array(6).fill(0.5), { ids: [7n] })
  await w.flush()
  w.close()
  r.close()
})
