// Chassis through Node.js beside hnswlib-node and beside Chassis through Python, on
// pypi-minilm (issue 39): build time (one thread each), then an ef sweep, each system's QPS
// at every ef (one query per call; Chassis also as one batch call), recall@10 against the
// ground truth, and QPS at recall 0.95 interpolated along each sweep. The whole process is
// pinned to one core by bench/node/run (taskset), so Chassis's thread-pool calls and Python's
// run on the same core as everything else. Medians of `REPS` passes after a warm-up, the
// systems taking turns per ef. Prints markdown.
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'

import { Index } from 'chassis'
import hnswlib from 'hnswlib-node'

const ROOT = path.resolve(new URL('.', import.meta.url).pathname, '../..')
const DATA = path.resolve(ROOT, '../shared/data/pypi-minilm')
const OUT = path.join(ROOT, 'bench/target/node')
const REPS = Number(process.env.REPS ?? 5)
const EFS = (process.env.EFS ?? '16,24,32,48,64,96,128').split(',').map(Number)
const PYTHON = process.env.CHASSIS_BENCH_PYTHON ?? path.join(ROOT, 'bench/.venv/bin/python')
const K = 10

function fvecs(file) {
  const b = fs.readFileSync(file)
  const dims = b.readInt32LE(0)
  const n = b.length / (4 + 4 * dims)
  const out = new Float32Array(n * dims)
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < dims; j++) out[i * dims + j] = b.readFloatLE(i * (4 + 4 * dims) + 4 + 4 * j)
  }
  return { dims, n, data: out }
}

function ivecs(file) {
  const b = fs.readFileSync(file)
  const k = b.readInt32LE(0)
  const n = b.length / (4 + 4 * k)
  return Array.from({ length: n }, (_, i) => Array.from({ length: k }, (_, j) => b.readInt32LE(i * (4 + 4 * k) + 4 + 4 * j)))
}

const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]

function recall(found, gt) {
  let hit = 0
  found.forEach((ids, i) => {
    const truth = new Set(gt[i].slice(0, K))
    for (const id of ids.slice(0, K)) if (truth.has(Number(id))) hit++
  })
  return hit / (K * found.length)
}

/** QPS at recall 0.95, interpolated linearly between the two efs around it. */
function at95(rows) {
  for (let i = 1; i < rows.length; i++) {
    const [a, b] = [rows[i - 1], rows[i]]
    if (a.recall < 0.95 && b.recall >= 0.95) {
      const t = (0.95 - a.recall) / (b.recall - a.recall)
      return a.qps + t * (b.qps - a.qps)
    }
  }
  return rows[0]?.recall >= 0.95 ? rows[0].qps : NaN
}

async function main() {
  fs.mkdirSync(OUT, { recursive: true })
  const base = fvecs(path.join(DATA, 'pypi-minilm_base.fvecs'))
  const q = fvecs(path.join(DATA, 'pypi-minilm_query.fvecs'))
  const gt = ivecs(path.join(DATA, 'pypi-minilm_groundtruth.ivecs'))
  const dims = base.dims
  const queries = Array.from({ length: q.n }, (_, i) => q.data.subarray(i * dims, (i + 1) * dims))
  const queryArrays = queries.map((x) => Array.from(x))

  // Build, one thread each.
  const file = path.join(OUT, 'node.chassis')
  fs.rmSync(file, { force: true })
  let t0 = performance.now()
  const w = await Index.create(file, { dims, metric: 'cosine', M: 16, efConstruction: 200 })
  await w.add(base.data, { threads: 1 })
  await w.flush()
  w.close()
  const chassisBuild = (performance.now() - t0) / 1000
  t0 = performance.now()
  const h = new hnswlib.HierarchicalNSW('cosine', dims)
  h.initIndex(base.n, 16, 200, 100)
  for (let i = 0; i < base.n; i++) h.addPoint(Array.from(base.data.subarray(i * dims, (i + 1) * dims)), i)
  const hnswBuild = (performance.now() - t0) / 1000

  const ix = await Index.open(file, { readOnly: true })
  const systems = {
    'chassis (Node, await per query)': async (ef) => {
      const out = []
      for (const x of queries) out.push((await ix.search(x, { k: K, ef })).ids)
      return out
    },
    'chassis (Node, searchSync per query)': async (ef) => queries.map((x) => ix.searchSync(x, { k: K, ef }).ids),
    'chassis (Node, one batch call)': async (ef) => {
      const r = await ix.search(q.data, { k: K, ef, threads: 1 })
      return queries.map((_, i) => r.ids.subarray(i * K, (i + 1) * K))
    },
    'hnswlib-node 3.0.0 (per query)': async (ef) => {
      h.setEf(ef)
      return queryArrays.map((x) => h.searchKnn(x, K).neighbors)
    },
  }
  const results = Object.fromEntries(Object.keys(systems).map((s) => [s, []]))
  for (const ef of EFS) {
    const names = Object.keys(systems)
    const rates = Object.fromEntries(names.map((s) => [s, []]))
    let rec = {}
    for (let rep = 0; rep <= REPS; rep++) {
      for (let j = 0; j < names.length; j++) {
        const s = names[(j + rep) % names.length]
        const t = performance.now()
        const found = await systems[s](ef)
        const qps = queries.length / ((performance.now() - t) / 1000)
        if (rep === 0) rec[s] = recall(found, gt)
        else rates[s].push(qps)
      }
    }
    for (const s of names) results[s].push({ ef, recall: rec[s], qps: median(rates[s]) })
  }
  ix.close()

  // The same searches through Python, on the same file and core.
  let python = null
  if (fs.existsSync(PYTHON)) {
    const out = execFileSync(PYTHON, [path.join(ROOT, 'bench/node/python_side.py'), file, EFS.join(','), String(REPS)], { encoding: 'utf8' })
    python = JSON.parse(out)
    for (const [name, rows] of Object.entries(python)) {
      results[name] = rows.map((r) => ({ ...r, recall: recall(r.found, gt) }))
    }
  }

  console.log('## Through Node.js (pypi-minilm, one core)\n')
  console.log(`Build, one thread: Chassis ${chassisBuild.toFixed(1)} s (add, flush), hnswlib-node ${hnswBuild.toFixed(1)} s (addPoint per row): **${(chassisBuild / hnswBuild).toFixed(2)}x** (goal <= 1.0x).\n`)
  console.log('recall@10 / QPS at each ef (median of', REPS, 'passes after a warm-up; the systems take turns):\n')
  const names = Object.keys(results)
  console.log(`| ef | ${names.join(' | ')} |`)
  console.log(`|---:|${names.map(() => '---').join('|')}|`)
  EFS.forEach((ef, i) => {
    console.log(`| ${ef} | ${names.map((s) => `${results[s][i].recall.toFixed(3)} / ${Math.round(results[s][i].qps).toLocaleString('en-US')}`).join(' | ')} |`)
  })
  console.log('\nQPS at recall 0.95 (interpolated):\n')
  console.log('| system | QPS at 0.95 |\n|---|---:|')
  const q95 = Object.fromEntries(names.map((s) => [s, at95(results[s])]))
  for (const s of names) console.log(`| ${s} | ${Math.round(q95[s]).toLocaleString('en-US')} |`)
  const node = q95['chassis (Node, await per query)']
  const hn = q95['hnswlib-node 3.0.0 (per query)']
  console.log('\n### Goals (issue 39)\n\n| goal | measured | |\n|---|---:|---|')
  console.log(`| QPS at 0.95 through Node >= 1.5x hnswlib-node's (one query per call each) | ${(node / hn).toFixed(2)}x | ${node / hn >= 1.5 ? 'met' : '**not met**'} |`)
  if (python) {
    const py = q95['chassis (Python, one call per query)']
    const pyb = q95['chassis (Python, one batch call)']
    const nb = q95['chassis (Node, one batch call)']
    console.log(`| QPS at 0.95 through Node >= 0.9x the same search through Python (one query per call) | ${(node / py).toFixed(2)}x | ${node / py >= 0.9 ? 'met' : '**not met**'} |`)
    console.log(`| the same, one batch call each | ${(nb / pyb).toFixed(2)}x | ${nb / pyb >= 0.9 ? 'met' : '**not met**'} |`)
  }
  console.log(`| build (one thread) <= hnswlib-node's | ${(chassisBuild / hnswBuild).toFixed(2)}x | ${chassisBuild <= hnswBuild ? 'met' : '**not met**'} |`)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
