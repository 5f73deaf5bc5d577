// A TypeScript program using the client through its declarations, as an
// application would: `tsc -p tsconfig.json` (npm run typecheck) compiles it
// with no output, and test/types.test.js fails when it does not compile.
// The lines marked @ts-expect-error are misuses the declarations must
// refuse: a declaration too loose to catch one fails the check too.
import { Presenced, FINAL_CLOSES, backoffDelay, tokenExpiry, MAX_MESSAGE_BYTES, CONNECT_TIMEOUT_MS } from '@presenced/client';
import { MAX_NOTE_TEXT, MAX_NOTE_EMOJI } from '@presenced/client';
import type { ChannelState, Mode, Note, PresencedOptions, Records, SetOptions, State, Transport, UserRecord, UserState, WebSocketLike } from '@presenced/client';

const options: PresencedOptions = {
  url: 'wss://chat.example.com/ws',
  token: 'eyJ...',
  refreshToken: async () => (await fetch('/token')).text(),
  channels: ['lobby'],
  WebSocket, // the browser's; in Node, the ws package's default export
  reconnect: true,
  keepalive: true,
  maxMessageBytes: MAX_MESSAGE_BYTES,
  connectTimeoutMs: CONNECT_TIMEOUT_MS,
  transport: 'auto',
};
const p = new Presenced(options);
const via: Transport = p.transport;
console.log(via === 'sse' ? 'via SSE' : 'via WebSocket');
// @ts-expect-error: no such transport
new Presenced({ url: 'wss://chat.example.com/ws', transport: 'polling' });
// @ts-expect-error: which transport is in use is the client's to say
p.transport = 'sse';

function draw(c: ChannelState): string {
  const names: string[] = [...c.members].sort();
  const away: boolean = names.some((u) => c.away.has(u));
  return `${c.count}${c.complete ? '' : '+'} ${names.join(', ')}${away ? ' (some away)' : ''} ${c.typing.join(', ')}`;
}

p.addEventListener('presence', (e) => {
  const { channel, count, joins, leaves, away, active, users, updated } = e.detail;
  console.log(channel, count + 1, joins.concat(leaves, away, active).length, draw(p.channel(channel)));
  for (const [uid, r] of Object.entries(users)) console.log(uid, r.mode === 'dnd', r.note?.text);
  for (const uid of Object.keys(updated)) console.log(label(uid));
});

// A name from the application's info, a dnd badge, a note with its countdown.
function label(uid: string, now = Date.now()): string {
  const r: UserRecord | undefined = p.record(uid);
  const name = typeof r?.info?.name === 'string' ? r.info.name : uid;
  const note: Note | undefined = r?.note;
  const left = note?.until ? ` (${Math.ceil((note.until - now) / 60000)} min)` : '';
  return `${name}${r?.mode === 'dnd' ? ' ⛔' : ''}${note ? ` ${note.emoji ?? ''} ${note.text ?? ''}${left}` : ''}`;
}
p.addEventListener('state', (e) => {
  const s: State = e.detail.state;
  const code: number | undefined = e.detail.code;
  if (s === 'closed' && code !== undefined && FINAL_CLOSES.includes(code)) console.log('final', p.lastClose?.reason);
  if (s === 'waiting') console.log(`retry in ${p.retryAt - Date.now()} ms, attempt ${p.attempt}, up to ${backoffDelay(p.attempt)} ms`);
});
p.addEventListener('joined', (e) => console.log(e.detail.channel.toUpperCase()));
p.addEventListener('left', (e) => console.log(e.detail.channel));
p.addEventListener('typing', (e) => console.log(e.detail.users.length));
p.addEventListener('watching', (e) => console.log(e.detail.online, e.detail.away, e.detail.users, e.detail.last_seen.bob ?? 0));
p.addEventListener('status', (e) => {
  for (const [uid, at] of Object.entries(e.detail.last_seen)) console.log(uid, new Date(at));
  console.log(e.detail.online, e.detail.offline, e.detail.away, e.detail.active);
  const changed: Records = { ...e.detail.users, ...e.detail.updated };
  console.log(Object.keys(changed).map((uid) => label(uid)));
});
p.addEventListener('chat', (e) => console.log(`${e.detail.from}: ${e.detail.text} in ${e.detail.channel}`));
p.addEventListener('publish', (e) => console.log(e.detail.channel, e.detail.data));
p.addEventListener('message', (e) => console.log(e.detail.data));
p.addEventListener('error', (e) => console.log(e.detail.error, e.detail.channel ?? ''));
p.addEventListener('frame', (e) => console.log(e.detail.type), { once: true });

async function main(): Promise<void> {
  await p.join('room-7');
  const complete: boolean = await p.loadMembers('room-7');
  const more: boolean = await p.loadPage('room-7');
  console.log(complete, more, draw(p.channel('room-7')));
  p.watch(['bob']);
  const bob: UserState = p.user('bob');
  if (bob.state === 'offline' && bob.last_seen !== null) console.log(new Date(bob.last_seen));
  p.chat('room-7', 'hi');
  p.typing('room-7');
  p.setActivity('away');
  const mode: Mode = 'dnd';
  const mine: UserRecord = await p.set({ mode });
  await p.set({ note: { text: 'In a meeting', emoji: '📅', until: Date.now() + 30 * 60000 } });
  const clear: SetOptions = { mode: 'online', note: null };
  await p.set(clear);
  console.log(mine.mode, MAX_NOTE_TEXT + MAX_NOTE_EMOJI, p.record('bob')?.info);
  p.send({ type: 'ping' });
  await p.leave('room-7');
  console.log(p.uid, p.timeoutMs, p.away, p.liveSince, p.lastSent, p.lastRecv, p.silenced, p.silence(), tokenExpiry(p.token));
  p.close();
  p.connect();
  p.close('done');
}
void main();

// Any implementation with readyState, send and close will do.
class Loopback implements WebSocketLike {
  readyState = 1;
  constructor(readonly url: string) {}
  send(data: string): void { console.log(this.url, data); }
  close(): void { this.readyState = 3; }
}
new Presenced({ url: 'ws://localhost:8080/ws', uid: 'alice', WebSocket: Loopback }).close();

// Misuses the declarations refuse.
// @ts-expect-error url is required
new Presenced({ uid: 'alice' });
// @ts-expect-error not an activity
p.setActivity('asleep');
p.addEventListener('presence', (e) => {
  // @ts-expect-error count is a number
  const n: string = e.detail.count;
  console.log(n);
});
// @ts-expect-error members is a Set, not an array
p.channel('lobby').members.map((u: string) => u);
// @ts-expect-error join resolves to nothing
const joined: boolean = await p.join('lobby');
// @ts-expect-error the state is the client's to change
p.state = 'live';
// @ts-expect-error set needs a mode or a note
void p.set({});
// @ts-expect-error not a mode
void p.set({ mode: 'busy' });
// @ts-expect-error a note needs text or an emoji
void p.set({ note: { until: 1 } });
// @ts-expect-error a record never says online
const online: UserRecord = { mode: 'online' };
console.log(online);
// @ts-expect-error maxMessageBytes is a number
new Presenced({ url: 'ws://x/ws', maxMessageBytes: '4MB' });
console.log(joined);
