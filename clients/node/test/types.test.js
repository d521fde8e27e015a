// The TypeScript declarations: they compile with tsc --strict against a use of every helper,
// and they declare exactly what the package exports at run time.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as action from '../lib/action.js';
import * as client from '../index.js';

const root = fileURLToPath(new URL('..', import.meta.url));

test('index.d.ts, fastify.d.ts and nestjs.d.ts compile with tsc --strict against test/types/*.ts', async () => {
  const tsc = `${root}node_modules/typescript/bin/tsc`;
  const { stdout, stderr } = await promisify(execFile)(process.execPath,
    [tsc, '-p', `${root}test/types/tsconfig.json`]).catch((err) => err);
  assert.equal(`${stdout}${stderr}`.trim(), '');
});

test('index.d.ts declares every run-time export, and nothing more', () => {
  const declarations = (file) => [...fs.readFileSync(`${root}${file}`, 'utf8')
    .matchAll(/^export (?:declare )?(?:function|class|const) (\w+)/gm)].map((m) => m[1]);
  const dts = fs.readFileSync(`${root}index.d.ts`, 'utf8');
  // Re-exported from action.d.ts by name: each name must be declared there.
  const reexported = [...dts.matchAll(/^export \{([^}]*)\} from '\.\/action\.js';/gm)]
    .flatMap((m) => m[1].split(',').map((name) => name.trim()).filter(Boolean));
  const inAction = new Set(declarations('action.d.ts'));
  for (const name of reexported) assert.ok(inAction.has(name), `action.d.ts declares ${name}`);
  const declared = new Set([...declarations('index.d.ts'), ...reexported]);
  assert.deepEqual([...declared].sort(), Object.keys(client).sort());
});

test('action.d.ts declares exactly the run-time exports of lib/action.js', () => {
  const dts = fs.readFileSync(`${root}action.d.ts`, 'utf8');
  const declared = new Set([...dts.matchAll(/^export (?:declare )?(?:function|class|const) (\w+)/gm)]
    .map((m) => m[1]));
  assert.deepEqual([...declared].sort(), Object.keys(action).sort());
});

for (const entry of ['fastify', 'nestjs']) {
  test(`${entry}.d.ts declares exactly the run-time exports of lib/${entry}.js`, async () => {
    const module = await import(`../lib/${entry}.js`);
    const dts = fs.readFileSync(`${root}${entry}.d.ts`, 'utf8');
    const declared = new Set([...dts.matchAll(/^export (?:declare )?(?:function|class|const) (\w+)/gm)]
      .map((m) => m[1]));
    assert.deepEqual([...declared].sort(), Object.keys(module).sort());
  });
}
