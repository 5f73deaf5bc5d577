// The Node quick start of docs/clients.md, run as written against the test
// server: only its server address and module specifiers are rewritten.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, env, until, wsURL } from './helpers.js';

const base = env('PRESENCED_URL');

test('the quick start of docs/clients.md runs', async (t) => {
  const doc = readFileSync(new URL('../../../docs/clients.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf('\n## JavaScript\n'));
  const code = /```js\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(code, 'a js block under ## JavaScript');
  const run = code
    .replace("'ws://localhost:8080/ws'", JSON.stringify(wsURL(base)))
    .replace("from '@presenced/client'", `from ${JSON.stringify(new URL('../presenced.js', import.meta.url).href)}`)
    .replace("from 'ws'", `from ${JSON.stringify(import.meta.resolve('ws'))}`);
  assert.notEqual(run, code);
  const dir = mkdtempSync(join(tmpdir(), 'presenced-quickstart-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'quickstart.mjs');
  writeFileSync(file, run);

  const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill());
  let out = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { out += d; });
  let exited = null;
  child.on('exit', (code) => { exited = code; });
  await until('alice hears her chat', () => out.includes('alice: hi') || exited !== null);
  assert.equal(exited, null, `the quick start ended early:\n${out}`);
  assert.match(out, /count: 1,\s+members: Set\(1\) \{ 'alice' \}/, out);
  assert.ok((await api(base, '/api/channels/room-7')).members.includes('alice'));
  assert.ok((await api(base, '/api/channels/lobby')).members.includes('alice'));
});
