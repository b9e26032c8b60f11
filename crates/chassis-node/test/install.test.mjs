// The tarball `scripts/node-pack` prints installs into a fresh project in at most 5 s (no
// compile at install time) and works there, from CommonJS and ESM. Runs when
// $CHASSIS_NODE_TARBALL names it (scripts/test sets it).
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { test } from 'node:test'

import { tmpdir } from './helpers.mjs'

const tarball = process.env.CHASSIS_NODE_TARBALL
const skip = !tarball && process.env.CHASSIS_REQUIRE_TARBALL !== '1' ? 'set CHASSIS_NODE_TARBALL (scripts/node-pack prints it)' : false

test('the tarball installs in a fresh project in at most 5 s and runs', { skip }, (t) => {
  assert.ok(tarball && fs.existsSync(tarball), `tarball ${tarball}`)
  const dir = tmpdir(t)
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'fresh', version: '1.0.0', private: true }))
  const t0 = performance.now()
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--offline', tarball], { cwd: dir, stdio: 'pipe' })
  const seconds = (performance.now() - t0) / 1000
  t.diagnostic(`npm install of the tarball: ${seconds.toFixed(2)} s`)
  assert.ok(seconds <= 5, `install took ${seconds} s`)
  const cjs = `const { Index } = require('chassis');
    (async () => { const ix = await Index.create('x.chassis', { dims: 3, metric: 'l2' });
      await ix.add([[1, 2, 3]]); await ix.flush(); const r = await ix.search([1, 2, 3], { k: 1 });
      console.log(String(r.ids[0])); ix.close() })()`
  assert.equal(execFileSync(process.execPath, ['-e', cjs], { cwd: dir, encoding: 'utf8' }).trim(), '0')
  fs.writeFileSync(path.join(dir, 'm.mjs'), `import { Index, MISSING_ID } from 'chassis'
    const ix = await Index.open('x.chassis', { readOnly: true }); console.log(ix.size, typeof MISSING_ID)`)
  assert.equal(execFileSync(process.execPath, ['m.mjs'], { cwd: dir, encoding: 'utf8' }).trim(), '1 bigint')
})
