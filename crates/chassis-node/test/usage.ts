// Type-checked by types.test.mjs (tsc --noEmit --strict): the README's uses of the API, with
// its declarations (index.d.ts).
import { Index, Collection, LockedError, ChassisError, MISSING_ID, CODE_KINDS, chassisId } from '../index.js'
import type { CodeKind } from '../index.js'
import type { SearchResult, HybridResult, TextResult } from '../index.js'

async function main(): Promise<void> {
  const ix: Index = await Index.create('docs.chassis', { dims: 4, metric: 'cosine', textFields: ['text', { name: 'title', stem: true }] })
  const ids: BigUint64Array = await ix.add(new Float32Array(8), { metadata: [{ text: 'a' }, null], threads: 0 })
  await ix.add([[1, 2, 3, 4]], { ids: [5n] })
  const r: SearchResult = await ix.search([1, 0, 0, 0], { k: 3, filter: { text: 'a' } })
  const h: HybridResult = await ix.search([1, 0, 0, 0], { k: 3, text: 'a', fusion: 'relative_score', weights: [0.3, 0.7], returnLegs: true })
  const t: TextResult = await ix.searchText(['a', 'b'], { k: 2 })
  const first: bigint = r.ids[0] === MISSING_ID ? 0n : r.ids[0]
  const ranks: Uint32Array | undefined = h.legs?.vectorRanks
  const meta = ix.getMetadata(ids[0])
  const vectors: Float32Array[] = ix.get([0n, 1n])
  ix.userVersion = 3n
  await ix.flush()
  await ix.compact({ M: 24, keepGraph: false })
  const kind: CodeKind = CODE_KINDS[1]
  await ix.compact({ codes: kind })
  const c = await Collection.create('col', { dims: 4, shards: 2 })
  await c.add(new Float32Array(4))
  c.close()
  try {
    await Index.open('docs.chassis')
  } catch (e) {
    if (e instanceof LockedError) console.log(e.code)
    if (e instanceof ChassisError) console.log(e.message)
  }
  const key: bigint = chassisId('doc-1')
  console.log(first, ranks, meta, vectors, t.scores, key)
  ix[Symbol.dispose]()
}
void main
