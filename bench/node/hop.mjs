// The price of one awaited call on libuv's thread pool against the same call on the event
// loop's thread, pinned to one core: Chassis's search (its wrapper and its raw binding) beside
// Node's own fs.stat, which takes the same pool. Prints µs per call (medians of 5 passes).
//   taskset -c 1 node bench/node/hop.mjs   (after `bash bench/node/run`, which installs the package here)
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

import { Index } from 'chassis'

const N = 20000
const DIMS = 384
const CALLS = 4000
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'chassis-hop-'))
let seed = 7
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5
const data = new Float32Array(N * DIMS).map(rand)
const idx = await Index.create(path.join(dir, 'hop.chassis'), { dims: DIMS, metric: 'cosine' })
await idx.add(data)
const queries = Array.from({ length: 64 }, (_, i) => data.slice(i * DIMS, (i + 1) * DIMS))
const stat = path.join(dir, 'hop.chassis')

async function time(fn) {
  const passes = []
  for (let p = 0; p < 6; p++) {
    const t0 = process.hrtime.bigint()
    for (let i = 0; i < CALLS; i++) await fn(i)
    passes.push(Number(process.hrtime.bigint() - t0) / 1000 / CALLS)
  }
  passes.shift()
  return passes.sort((a, b) => a - b)[2]
}

const rows = [
  ['search, awaited', (i) => idx.search(queries[i & 63], { k: 10, ef: 32 })],
  ['search, raw binding awaited', (i) => idx._raw.search(queries[i & 63], 1, 10, 32, 1, null)],
  ['searchSync', (i) => idx.searchSync(queries[i & 63], { k: 10, ef: 32 })],
  ['searchSync, raw binding', (i) => idx._raw.searchSync(queries[i & 63], 1, 10, 32, null)],
  ['fs.promises.stat, awaited', () => fs.promises.stat(stat)],
  ['fs.statSync', () => fs.statSync(stat)],
  ['await of a resolved value', () => 0],
]
for (const [name, fn] of rows) console.log(`${name}: ${(await time(fn)).toFixed(2)} µs`)
await idx.close()
fs.rmSync(dir, { recursive: true })
