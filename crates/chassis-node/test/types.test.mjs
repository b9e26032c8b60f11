// The declarations (index.d.ts) type-check the API's documented uses (usage.ts) under
// TypeScript's strict mode.
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { test } from 'node:test'

const pkg = path.resolve(new URL('.', import.meta.url).pathname, '..')
const tsc = path.join(pkg, 'node_modules/.bin/tsc')

test('index.d.ts type-checks usage.ts with tsc --strict', () => {
  assert.ok(fs.existsSync(tsc), 'typescript is a dev dependency: run npm ci (scripts/node-pack does)')
  const r = spawnSync(tsc, [
    '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext',
    '--lib', 'es2022,esnext.disposable,dom', path.join(pkg, 'test/usage.ts'),
  ], { encoding: 'utf8' })
  assert.equal(r.status, 0, r.stdout + r.stderr)
})
