// The quick starts of docs/clients.md, run as written against the test
// server: the Node one in a folder laid out as `npm install
// <checkout>/web/client ws` leaves it, the page's script with the module the
// server serves at /presenced.js. Only the server's address is filled in.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { api, env, raw, uniq, until, wsURL } from './helpers.js';

const base = env('PRESENCED_URL');
const clientDir = fileURLToPath(new URL('..', import.meta.url));

const doc = readFileSync(new URL('../../../docs/clients.md', import.meta.url), 'utf8');
const section = doc.slice(doc.indexOf('\n## JavaScript\n'), doc.indexOf('\n## Go\n'));
const block = (lang) => new RegExp('```' + lang + '\\n([\\s\\S]*?)```').exec(section)?.[1];

function tempDir(t) {
  const dir = mkdtempSync(join(tmpdir(), 'presenced-quickstart-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// run starts node on file and collects what it prints; it is killed when the test ends.
function run(t, args) {
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill());
  const r = { out: '', exited: null };
  child.stdout.on('data', (d) => { r.out += d; });
  child.stderr.on('data', (d) => { r.out += d; });
  child.on('exit', (code) => { r.exited = code; });
  return r;
}

test('the Node quick start of docs/clients.md runs as written, installed from the checkout', async (t) => {
  assert.match(block('sh') ?? '', /^npm install \/path\/to\/presenced\/web\/client ws$/m, 'the install step names the checkout');
  const code = block('js');
  assert.ok(code, 'a js block under ## JavaScript');
  assert.match(code, /from '@presenced\/client'/);
  const quick = code.replace("'ws://localhost:8080/ws'", JSON.stringify(wsURL(base)));
  assert.notEqual(quick, code, 'the server address is ws://localhost:8080/ws');
  // What `npm install <checkout>/web/client ws` leaves: a link to the folder, and ws.
  const dir = tempDir(t);
  mkdirSync(join(dir, 'node_modules', '@presenced'), { recursive: true });
  symlinkSync(clientDir, join(dir, 'node_modules', '@presenced', 'client'), 'dir');
  symlinkSync(dirname(fileURLToPath(import.meta.resolve('ws/package.json'))), join(dir, 'node_modules', 'ws'), 'dir');
  writeFileSync(join(dir, 'quickstart.mjs'), quick);

  const r = run(t, [join(dir, 'quickstart.mjs')]);
  await until('alice hears her chat', () => r.out.includes('alice: hi') || r.exited !== null);
  assert.equal(r.exited, null, `the quick start ended early:\n${r.out}`);
  assert.match(r.out, /count: 1,\s+members: Set\(1\) \{ 'alice' \}/, r.out);
  assert.ok((await api(base, '/api/channels/room-7')).members.includes('alice'));
  assert.ok((await api(base, '/api/channels/lobby')).members.includes('alice'));
});

test("the page's quick start of docs/clients.md runs with the server's /presenced.js", async (t) => {
  // Node 20 has a WebSocket of the browser's kind behind a flag; later ones have it anyway.
  const flags = typeof WebSocket === 'function' ? [] : ['--experimental-websocket'];
  if (flags.length && !process.allowedNodeEnvironmentFlags.has(flags[0])) {
    t.skip('this Node has no WebSocket of its own');
    return;
  }
  const html = block('html');
  const script = /<script type="module">\n([\s\S]*?)<\/script>/.exec(html ?? '')?.[1];
  assert.ok(script, 'an html block with a module script under ## JavaScript');
  assert.match(script, /from '\/presenced\.js'/);
  const res = await fetch(`${base}/presenced.js`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/javascript/);
  const served = await res.text();
  assert.equal(served, readFileSync(join(clientDir, 'presenced.js'), 'utf8'), 'the server serves this module');
  // The page's origin is the server's; its script imports what the server served.
  const dir = tempDir(t);
  writeFileSync(join(dir, 'presenced.js'), served);
  writeFileSync(join(dir, 'page.mjs'), `globalThis.location = new URL(${JSON.stringify(base + '/')});\n` +
    script.replace("from '/presenced.js'", "from './presenced.js'"));

  const r = run(t, [...flags, join(dir, 'page.mjs')]);
  await until('the lobby shown', () => /lobby \[.*'alice'.*\]/.test(r.out) || r.exited !== null);
  assert.equal(r.exited, null, `the page's script ended early:\n${r.out}`);
  const friend = uniq('page-friend');
  await raw(t, base, friend, ['lobby']);
  await until('the friend shown', () => r.out.includes(`'${friend}'`) || r.exited !== null);
  assert.equal(r.exited, null, r.out);
});
