// The API against brute force, metadata and filters, writes and their errors, full-text and
// hybrid search, collections, and the handle's life (flush, rollback, reopen, dispose).
import assert from 'node:assert/strict'
import path from 'node:path'
import { test } from 'node:test'

import {
  CODE_KINDS,
  Collection,
  DimensionMismatchError,
  DuplicateIdError,
  Index,
  InvalidArgumentError,
  InvalidVectorError,
  LockedError,
  MISSING_ID,
  NotFoundError,
  ReadOnlyError,
  chassisId,
  ChassisError,
} from '../index.mjs'
import { bruteForce, clustered, tmpdir } from './helpers.mjs'

const DIMS = 16

test('search agrees with brute force, in every input form', async (t) => {
  const dir = tmpdir(t)
  const data = clustered(3000, DIMS, 1)
  const ix = await Index.create(path.join(dir, 'a.chassis'), { dims: DIMS, metric: 'l2', M: 12 })
  const ids = await ix.add(data, { threads: 2 })
  assert.equal(ids.length, 3000)
  assert.equal(ids[0], 0n)
  assert.equal(ix.size, 3000)
  const queries = clustered(50, DIMS, 2)
  const res = await ix.search(queries, { k: 10, ef: 96 })
  assert.equal(res.ids.length, 500)
  assert.equal(res.rows, 50)
  assert.equal(res.k, 10)
  let hit = 0
  for (let r = 0; r < 50; r++) {
    const truth = new Set(bruteForce(data, DIMS, queries.subarray(r * DIMS, (r + 1) * DIMS), 10))
    for (let i = 0; i < 10; i++) if (truth.has(Number(res.ids[r * 10 + i]))) hit++
    for (let i = 1; i < 10; i++) assert.ok(res.distances[r * 10 + i] >= res.distances[r * 10 + i - 1])
  }
  assert.ok(hit / 500 >= 0.95, `recall ${hit / 500}`)
  // An array of arrays, one plain array, and the synchronous twin give the same answer.
  const rows = Array.from({ length: 3 }, (_, r) => Array.from(queries.subarray(r * DIMS, (r + 1) * DIMS)))
  const a = await ix.search(rows, { k: 5, threads: 1 })
  const b = ix.searchSync(queries.subarray(0, 3 * DIMS), { k: 5 })
  assert.deepEqual(a.ids, b.ids)
  const one = await ix.search(rows[0], { k: 5 })
  assert.deepEqual(one.ids, a.ids.subarray(0, 5))
  // Padding when fewer than k exist; an absurd k is lowered to the live count.
  const small = await Index.create(path.join(dir, 's.chassis'), { dims: 2, metric: 'l2' })
  await small.add([[0, 0], [1, 1]])
  const padded = await small.search([0, 0], { k: 4 })
  assert.deepEqual([...padded.ids], [0n, 1n, MISSING_ID, MISSING_ID])
  assert.equal(padded.distances[3], Infinity)
  const huge = await small.search([0, 0], { k: 10_000_000 })
  assert.equal(huge.k, 2)
  ix.close()
  small.close()
})

test('CODE_KINDS lists every code kind, and each creates an index keeping it', async (t) => {
  assert.deepEqual([...CODE_KINDS], ['none', 'int8', 'int4'])
  assert.ok(Object.isFrozen(CODE_KINDS))
  const dir = tmpdir(t)
  const data = clustered(1200, DIMS, 4)
  for (const codes of CODE_KINDS) {
    const ix = await Index.create(path.join(dir, `${codes}.chassis`), { dims: DIMS, codes })
    await ix.add(data, { threads: 1 })
    assert.equal(ix.info().codes, codes)
    ix.close()
  }
  await assert.rejects(Index.create(path.join(dir, 'pq.chassis'), { dims: DIMS, codes: 'pq' }), (e) => {
    assert.ok(e instanceof InvalidArgumentError)
    assert.match(e.message, /codes must be one of/)
    return true
  })
})

test('ids, metadata, filters, upserts and deletes', async (t) => {
  const dir = tmpdir(t)
  const data = clustered(400, DIMS, 3)
  const ix = await Index.create(path.join(dir, 'm.chassis'), { dims: DIMS, metric: 'l2' })
  const given = Array.from({ length: 400 }, (_, i) => BigInt(1000 + i))
  const meta = given.map((_, i) => ({ tenant: i % 2 ? 'acme' : 'globex', n: i, tags: [`t${i % 5}`] }))
  meta[7] = null
  await ix.add(data, { ids: given, metadata: meta })
  assert.deepEqual(ix.getMetadata(1001n), { n: 1, tags: ['t1'], tenant: 'acme' })
  assert.deepEqual(ix.getMetadata(1007), {})
  assert.deepEqual(ix.getMetadata([1000n, 1002n]).map((m) => m.n), [0, 2])
  assert.deepEqual([...ix.get(1005n)], [...data.subarray(5 * DIMS, 6 * DIMS)])
  assert.equal(ix.get([1000, 1001]).length, 2)
  assert.ok(ix.has(1399n) && !ix.has(5n))
  // Filters: exact k nearest that pass.
  const q = data.subarray(10 * DIMS, 11 * DIMS)
  const filter = { tenant: 'acme', n: { $lt: 200 } }
  const res = await ix.search(q, { k: 10, filter })
  const truth = bruteForce(data, DIMS, q, 10, (i) => i % 2 === 1 && i < 200 && i !== 7).map((i) => BigInt(1000 + i))
  assert.deepEqual([...res.ids], truth)
  const per = await ix.search(data.subarray(0, 2 * DIMS), { k: 3, filter: [{ tags: { $contains: 't3' } }, null] })
  for (const id of per.ids.subarray(0, 3)) assert.equal(ix.getMetadata(id).tags[0], 't3')
  await assert.rejects(ix.search(q, { filter: { n: { $regex: 'x' } } }), InvalidArgumentError)
  // Errors, each of its class, with a stable code.
  await assert.rejects(ix.add(data.subarray(0, DIMS), { ids: [1000n] }), (e) => e instanceof DuplicateIdError && e.code === 'CHASSIS_DUPLICATE_ID')
  await assert.rejects(ix.add(new Float32Array(DIMS - 1)), DimensionMismatchError)
  const nan = new Float32Array(DIMS)
  nan[3] = NaN
  await assert.rejects(ix.add(nan), InvalidVectorError)
  assert.throws(() => ix.get(5n), (e) => e instanceof NotFoundError && e instanceof ChassisError)
  await assert.rejects(ix.delete([1000n, 77n]), NotFoundError)
  assert.ok(ix.has(1000n), 'nothing deleted when one id is not live')
  await assert.rejects(ix.search(q, { k: 0 }), InvalidArgumentError)
  await assert.rejects(ix.add(data.subarray(0, DIMS), { metadata: { bad: NaN } }), InvalidArgumentError)
  await assert.rejects(ix.add(data.subarray(0, DIMS), { ids: [-1] }), InvalidArgumentError)
  // Upsert, setMetadata, delete.
  await ix.upsert(data.subarray(0, 2 * DIMS), { ids: [1000n, 5000n], metadata: [{ v: 2 }, { v: 3 }] })
  assert.deepEqual(ix.getMetadata(5000n), { v: 3 })
  await ix.setMetadata([1001n], [{ moved: true }])
  assert.deepEqual(ix.getMetadata(1001n), { moved: true })
  await ix.delete([1002n, 1003n])
  assert.equal(ix.size, 399)
  await ix.flush()
  // Rollback discards since the flush.
  await ix.add(data.subarray(0, DIMS), { ids: [9999n] })
  ix.userVersion = 41n
  ix.rollback()
  assert.ok(!ix.has(9999n))
  assert.equal(ix.userVersion, 0n)
  ix.userVersion = 42n
  ix.flushSync()
  ix.close()
  const again = await Index.open(path.join(dir, 'm.chassis'))
  assert.equal(again.userVersion, 42n)
  assert.equal(again.size, 399)
  assert.equal(again.info().count, 399)
  again.close()
})

test('one writer, readers beside it, dispose, compact and backup', async (t) => {
  const dir = tmpdir(t)
  const file = path.join(dir, 'w.chassis')
  const data = clustered(600, DIMS, 4)
  // As `using ix = ...` would (Node 20 has Symbol.dispose, not the syntax).
  const disposable = Index.createSync(file, { dims: DIMS, metric: 'cosine' })
  try {
    const ix = disposable
    await ix.add(data.subarray(0, 300 * DIMS))
    await ix.flush()
    await assert.rejects(Index.open(file), (e) => e instanceof LockedError && /readOnly/.test(e.message))
    const reader = await Index.open(file, { readOnly: true })
    assert.equal(reader.size, 300)
    await ix.add(data.subarray(300 * DIMS))
    assert.equal(reader.size, 300, 'a reader sees flushes only')
    await ix.flush()
    assert.equal(reader.size, 600)
    await assert.rejects(reader.add(data.subarray(0, DIMS)), ReadOnlyError)
    reader.close()
    const report = await ix.backup(path.join(dir, 'copy.chassis'))
    assert.equal(report.live, 600)
    assert.equal(report.fullCopy, true)
    await ix.delete([0n, 1n, 2n])
    assert.equal(ix.info().format, 6, 'the default layout: planar split halves')
    await ix.compact({ M: 24, threads: 1 })
    assert.equal(ix.info().M, 24)
    assert.equal(ix.size, 597)
    await ix.compact({ format: 4, keepGraph: true })
    assert.deepEqual([ix.info().format, ix.info().readVersion], [4, 4])
    assert.equal(ix.size, 597)
    // A precision without a format keeps a layout that already stores it.
    await ix.compact({ precision: 'f32', keepGraph: true })
    assert.deepEqual([ix.info().format, ix.info().precision], [4, 'f32'])
    await ix.compact({ precision: 'f16' })
    assert.deepEqual([ix.info().format, ix.info().precision], [5, 'f16'])
    await ix.compact({ precision: 'f32' })
    assert.deepEqual([ix.info().format, ix.info().precision], [6, 'f32'])
    await assert.rejects(ix.compact({ precision: 'f8' }), InvalidArgumentError)
    assert.equal(ix.size, 597)
  } finally {
    disposable[Symbol.dispose]()
  }
  // Disposed at the end of the block: the lock is free again.
  const ix = Index.openSync(file)
  assert.equal(ix.size, 597)
  ix.close()
  assert.ok(ix.closed)
  assert.throws(() => ix.size, InvalidArgumentError)
  const copy = await Index.open(path.join(dir, 'copy.chassis'), { readOnly: true })
  assert.equal(copy.size, 600)
  copy.close()
})

test('full-text and hybrid search', async (t) => {
  const dir = tmpdir(t)
  const words = ['rust parser', 'python web framework', 'rust web server', 'python parser', 'json']
  const data = clustered(5, 4, 5)
  const ix = await Index.create(path.join(dir, 't.chassis'), { dims: 4, metric: 'l2', textFields: ['text', { name: 'title', stem: true, stopWords: true }] })
  assert.deepEqual(ix.textFields.map((f) => [f.name, f.stem]), [['text', false], ['title', true]])
  await ix.add(data, { metadata: words.map((w, i) => ({ text: w, title: i === 4 ? 'The parsing of it' : null })) })
  // "parser" in the text field; "parsed" stemmed as the title's "parsing" ("pars").
  const r = await ix.searchText(['parser', 'parsed', 'nothing at all'], { k: 3 })
  assert.deepEqual(new Set(r.ids.subarray(0, 2)), new Set([0n, 3n]))
  assert.equal(r.ids[2], MISSING_ID)
  assert.equal(r.scores[2], -Infinity)
  assert.deepEqual([...r.ids.subarray(3, 6)], [4n, MISSING_ID, MISSING_ID])
  assert.ok([...r.ids.subarray(6)].every((id) => id === MISSING_ID))
  const f = await ix.searchText('parser', { k: 5, filter: { text: { $ne: 'rust parser' } } })
  assert.equal(f.ids[0], 3n)
  const h = await ix.search(data.subarray(2 * 4, 3 * 4), { k: 3, text: 'web', returnLegs: true })
  assert.equal(h.ids[0], 2n)
  assert.equal(h.legs.vectorRanks[0], 1)
  assert.ok(h.legs.textRanks[0] >= 1)
  const rel = await ix.search(data.subarray(0, 4), { k: 2, text: 'json', fusion: 'relative_score', weights: [0.2, 0.8] })
  assert.equal(rel.ids[0], 4n)
  await assert.rejects(ix.search(data.subarray(0, 4), { text: ['a', 'b'] }), InvalidArgumentError)
  await ix.setTextFields([])
  await assert.rejects(ix.searchText('json'), InvalidArgumentError)
  ix.close()
})

test('collections and the id mapping of the LangChain stores', async (t) => {
  const dir = tmpdir(t)
  const data = clustered(500, DIMS, 6)
  const c = await Collection.create(path.join(dir, 'col'), { dims: DIMS, metric: 'l2', shards: 3 })
  const ids = await c.add(data, { metadata: Array.from({ length: 500 }, (_, i) => ({ n: i })) })
  assert.equal(c.size, 500)
  const q = data.subarray(9 * DIMS, 10 * DIMS)
  const res = await c.search(q, { k: 10, ef: 128 })
  const truth = bruteForce(data, DIMS, q, 10).map(BigInt)
  assert.deepEqual([...res.ids], truth.map((i) => ids[Number(i)]))
  const filtered = await c.search(q, { k: 5, filter: { n: { $gte: 250 } } })
  for (const id of filtered.ids) assert.ok(c.getMetadata(id).n >= 250)
  await c.flush()
  c.close()
  const ro = await Collection.open(path.join(dir, 'col'), { readOnly: true })
  assert.equal(ro.size, 500)
  ro.close()
  // The same uint64 as Python's hashlib.blake2b(id, digest_size=8), little-endian.
  assert.equal(chassisId('abc'), 6455300059550759896n)
})
