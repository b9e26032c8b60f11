// Shared test helpers: seeded data, brute force, temporary directories.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

export function tmpdir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'chassis-node-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** A seeded xorshift generator. */
export function rng(seed) {
  let x = BigInt(seed) * 0x9e3779b97f4a7c15n | 1n
  const mask = (1n << 64n) - 1n
  return () => {
    x ^= x >> 12n
    x ^= (x << 25n) & mask
    x ^= x >> 27n
    return Number(((x * 0x2545f4914f6cdd1dn) & mask) >> 11n) / 2 ** 53
  }
}

/** `n` vectors of `dims` in a few Gaussian-ish clusters, flat. */
export function clustered(n, dims, seed) {
  const r = rng(seed)
  const normal = () => {
    const u = Math.max(r(), 1e-9)
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * r())
  }
  const centres = Array.from({ length: 6 }, () => Array.from({ length: dims }, () => normal() * 4))
  const out = new Float32Array(n * dims)
  for (let i = 0; i < n; i++) {
    const c = centres[Math.floor(r() * centres.length)]
    for (let j = 0; j < dims; j++) out[i * dims + j] = c[j] + normal()
  }
  return out
}

/** Exact k nearest by squared L2 among `rows` (flat), optionally only those `keep` passes. */
export function bruteForce(data, dims, q, k, keep = () => true) {
  const d = []
  for (let i = 0; i < data.length / dims; i++) {
    if (!keep(i)) continue
    let s = 0
    for (let j = 0; j < dims; j++) {
      const t = data[i * dims + j] - q[j]
      s += t * t
    }
    d.push([s, i])
  }
  d.sort((a, b) => a[0] - b[0] || a[1] - b[1])
  return d.slice(0, k).map((x) => x[1])
}

export const ROOT = path.resolve(new URL('.', import.meta.url).pathname, '../../..')
