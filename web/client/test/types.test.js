// The TypeScript declarations (presenced.d.ts): the package points at them,
// a typed program compiles with them (its misuses do not), and they name
// exactly what the module has: exports, the client's members, its options
// and its events. tsc is the typescript devDependency.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as client from '../presenced.js';

const dir = fileURLToPath(new URL('..', import.meta.url));
const tsc = join(dir, 'node_modules', 'typescript', 'bin', 'tsc');

// compile runs tsc with a project file, resolving to its exit code and output.
function compile(project) {
  assert.ok(existsSync(tsc), `${tsc} is missing: run npm ci in web/client (typescript is a devDependency)`);
  return new Promise((resolve) => {
    execFile(process.execPath, [tsc, '-p', project], { timeout: 120000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? 1) : 0, out: `${stdout}${stderr}` });
    });
  });
}

test('package.json points at the declarations', () => {
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  assert.equal(pkg.types, './presenced.d.ts');
  assert.deepEqual(pkg.exports, { '.': { types: './presenced.d.ts', default: './presenced.js' } });
  assert.ok(pkg.files.includes('presenced.d.ts') && pkg.files.includes('presenced.js'), 'both are published');
  assert.ok(existsSync(join(dir, 'presenced.d.ts')));
});

test('a typed program compiles against the declarations, and its misuses do not', async () => {
  const { code, out } = await compile(join(dir, 'tsconfig.json'));
  assert.equal(code, 0, `tsc -p tsconfig.json (examples/typed.ts):\n${out}`);
});

// Runtime names, to hold the declarations to.
function runtimeNames() {
  const src = readFileSync(join(dir, 'presenced.js'), 'utf8');
  const members = new Set([
    ...Object.getOwnPropertyNames(client.Presenced.prototype),
    ...Object.getOwnPropertyNames(EventTarget.prototype),
  ]);
  members.delete('constructor');
  class Idle { constructor() { this.readyState = 0; } send() {} close() {} }
  const p = new client.Presenced({ url: 'ws://127.0.0.1:9/ws', WebSocket: Idle, reconnect: false });
  p.close(); // before it connects: no socket is made
  for (const k of Object.keys(p)) members.add(k);
  const ctor = /constructor\(\{([\s\S]*?)\} = \{\}\)/.exec(src);
  assert.ok(ctor, 'the constructor takes one options object');
  const options = ctor[1].split(',').map((s) => s.trim().split(/[\s=:]/)[0]).filter(Boolean);
  const events = new Set([...src.matchAll(/#emit\('([a-z]+)'/g)].map((m) => m[1]));
  return { exports: Object.keys(client), members: [...members], options, events: [...events] };
}

test('the declarations name exactly the exports, members, options and events of the module', async (t) => {
  const names = runtimeNames();
  assert.ok(names.options.includes('maxMessageBytes') && names.events.includes('presence'), JSON.stringify(names));
  const tmp = mkdtempSync(join(tmpdir(), 'presenced-types-'));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  const mod = JSON.stringify(join(dir, 'presenced.js'));
  const exact = (type, keys) => `({ ${keys.map((k) => `${JSON.stringify(k)}: true`).join(', ')} }) satisfies Exact<${type}>;\n`;
  // An object literal of the runtime names, as Exact<keyof T>: a name
  // not declared is an excess property, a declared one missing is missing.
  writeFileSync(join(tmp, 'exact.mts'), [
    `import * as M from ${mod};`,
    `import type { Presenced, PresencedOptions, PresencedEventMap } from ${mod};`,
    'type Exact<K extends PropertyKey> = { [P in K]: true };',
    exact('keyof typeof M', names.exports),
    exact('keyof Presenced', names.members),
    exact('keyof PresencedOptions', names.options),
    exact('keyof PresencedEventMap', names.events),
  ].join('\n'));
  writeFileSync(join(tmp, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', lib: ['es2022', 'dom'], types: [], strict: true, noEmit: true },
    files: ['exact.mts'],
  }));
  const { code, out } = await compile(join(tmp, 'tsconfig.json'));
  assert.equal(code, 0, `the declarations differ from the module (runtime: ${JSON.stringify(names)}):\n${out}`);
});
