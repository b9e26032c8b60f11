// The README's Node.js example runs as written, in a fresh directory where `chassis` resolves
// to this package, and prints what its comments say.
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { test } from 'node:test'

import { ROOT, tmpdir } from './helpers.mjs'

test("the README's Node example runs", (t) => {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8')
  const m = /<!-- example: node -->\n```js\n([\s\S]*?)```/.exec(readme)
  assert.ok(m, 'the README has a Node example')
  const dir = tmpdir(t)
  fs.mkdirSync(path.join(dir, 'node_modules'))
  fs.symlinkSync(path.join(ROOT, 'crates/chassis-node'), path.join(dir, 'node_modules/chassis'), 'dir')
  fs.writeFileSync(path.join(dir, 'example.mjs'), m[1])
  const out = execFileSync(process.execPath, ['example.mjs'], { cwd: dir, encoding: 'utf8' })
  assert.equal(out, 'true true 3\n1n true 0n 1\ntrue CHASSIS_LOCKED\n')
})
