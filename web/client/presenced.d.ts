// Type declarations of presenced.js, the JavaScript client of presenced.
// They cover what the module exports; test/types.test.js checks them
// against the module and compiles examples/typed.ts with them.

/** The connection's state: `waiting` is the backoff before a reconnect, `closed` is for good (until `connect()`). */
export type State = 'connecting' | 'live' | 'waiting' | 'closed';

/** What is known of a joined channel: a copy, taken when `channel()` is called. */
export interface ChannelState {
  /** Every member, exact. */
  count: number;
  /** The members held: all of them while `complete`, else the snapshot's first ones and what pages and diffs added. */
  members: Set<string>;
  /** Those of `members` who are away. */
  away: Set<string>;
  /** Who types there now, sorted. */
  typing: string[];
  /** `members` holds every member: after a full snapshot, or after `loadMembers`, until a count-only diff. */
  complete: boolean;
}

/** What is known of a watched user. */
export interface UserState {
  state: 'unknown' | 'active' | 'away' | 'offline';
  /** Unix ms of the offline edge that a status frame reported, else null. */
  last_seen: number | null;
}

/** A user's mode as `set` takes it: `online` is the default, and a record never carries it. */
export type Mode = 'online' | 'dnd' | 'invisible';

/** A status note; the server clears it at `until`. */
export interface Note {
  /** At most 128 code points. */
  text?: string;
  /** At most 16 code points. */
  emoji?: string;
  /** When the note clears, in Unix ms: in the future, at most 7 days ahead. */
  until?: number;
}

/** What the application vouches for about a user (the token's `info` claim): a JSON object of its own choosing. */
export interface Info {
  [field: string]: unknown;
}

/** Who a user is and what it wants; each part is omitted when empty, so `{}` is a user with none. */
export interface Record {
  info?: Info;
  /** Absent: online. `invisible` is seen only by the user itself: to others an invisible user is offline. */
  mode?: Exclude<Mode, 'online'>;
  note?: Note;
}
/** The same as `Record`, under a name that does not hide TypeScript's own `Record` where it is imported. */
export type UserRecord = Record;

/** A note as `set` takes it: text or emoji, or both. */
export type NoteInput = Note & ({ text: string } | { emoji: string });

/** What `set` changes; what is left out stays as it is. `note: null` clears the note. */
export type SetOptions =
  | { mode: Mode; note?: NoteInput | null }
  | { mode?: Mode; note: NoteInput | null };

/** Records by user ID, as events carry them. */
export interface Records {
  [uid: string]: Record;
}

/** How the last connection ended. */
export interface CloseInfo {
  code: number;
  reason: string;
  /** Unix ms. */
  at: number;
}

/** The part of a WebSocket the client uses: a browser's, the `ws` package's, or one of your own. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** A WebSocket implementation: `globalThis.WebSocket` in browsers, the `ws` package's default export in Node. */
export type WebSocketConstructor = new (url: string, ...rest: any[]) => WebSocketLike;

/**
 * How the client reaches the server: `websocket`, or `sse` (Server-Sent Events: `GET /sse` read with `fetch`,
 * frames sent as `POST /sse/{session}`), for where a proxy strips the WebSocket upgrade.
 */
export type Transport = 'websocket' | 'sse';

export interface PresencedOptions {
  /** The server's WebSocket address, e.g. `wss://chat.example.com/ws`. */
  url: string;
  /** An HS256 JWT, for a server with `-jwt-secret`. */
  token?: string;
  /** Gives a newer token: called before the token's `exp`, and after a 4401 or an HTTP 401. Nothing, or a throw, means none. */
  refreshToken?: (() => Promise<string | null | undefined>) | null;
  /** The user ID, for a server in demo mode (no token). */
  uid?: string;
  /** Joined at connect and again after every reconnect. */
  channels?: string[];
  /** A WebSocket implementation; default `globalThis.WebSocket`. In Node 20, pass the `ws` package; with none, `auto` uses streams only. */
  WebSocket?: WebSocketConstructor | null;
  /**
   * `auto` (the default): every attempt tries a WebSocket first and, when it does not open or ends before its
   * welcome, falls back at once to Server-Sent Events, at the `/sse` beside the `/ws` of `url`. `websocket` or
   * `sse` pins one.
   */
  transport?: 'auto' | Transport;
  /** Reconnect after a close the server did not mean as final (default true). */
  reconnect?: boolean;
  /** Send app pings (default true). */
  keepalive?: boolean;
  /** The largest message read, in bytes; a larger one ends the connection (1009) (default 4 MiB). */
  maxMessageBytes?: number;
  /** From opening a connection to its welcome, in ms; past it the attempt is dropped (1006) and retried (default 10 s). */
  connectTimeoutMs?: number;
}

/** A frame the server sent, as it came. */
export interface ServerFrame {
  type: string;
  [field: string]: unknown;
}

/** A frame of the protocol to send as it is (see `send`). */
export interface ClientFrame {
  type: string;
  [field: string]: unknown;
}

/** The `detail` of each event, by its type. */
export interface PresencedEventMap {
  state: { state: State; code?: number };
  joined: { channel: string };
  left: { channel: string };
  /** `users`: the records of those in `joins`; `updated`: the whole new records of members whose record changed (`{}` when it became empty). */
  presence: { channel: string; count: number; joins: string[]; leaves: string[]; away: string[]; active: string[]; users: Records; updated: Records };
  typing: { channel: string; users: string[] };
  /** `users`: the records of those `online`; `last_seen`: Unix ms, of watched users offline where the server knows it. */
  watching: { online: string[]; away: string[]; users: Records; last_seen: { [uid: string]: number } };
  /** `users`: the records of those `online`; `updated`: the new records of watched users online whose record changed. */
  status: {
    online: string[]; offline: string[]; away: string[]; active: string[]; last_seen: { [uid: string]: number };
    users: Records; updated: Records;
  };
  chat: { channel: string; from: string; text: string };
  publish: { channel: string; data: unknown };
  message: { data: unknown };
  error: { error: string; channel?: string };
  frame: ServerFrame;
}

/** The events the client dispatches: CustomEvents whose `detail` is typed by the event's type. */
export interface PresencedEvent<T> extends Event {
  readonly detail: T;
}

export type PresencedListener<K extends keyof PresencedEventMap> = (this: Presenced, ev: PresencedEvent<PresencedEventMap[K]>) => void;

type ListenerOptions = boolean | { capture?: boolean; once?: boolean; passive?: boolean; signal?: AbortSignal };

/** One connection to presenced, reconnected as needed; an EventTarget of the events in `PresencedEventMap`. */
export class Presenced extends EventTarget {
  constructor(options: PresencedOptions);

  url: string;
  token: string;
  refreshToken: (() => Promise<string | null | undefined>) | null;
  /** The user ID: as given, then as the server's welcome says. */
  uid: string;
  reconnect: boolean;
  keepalive: boolean;
  maxMessageBytes: number;
  connectTimeoutMs: number;
  /** The transport of the current connection, or of the attempt under way. */
  readonly transport: Transport;
  readonly state: State;
  /** The server's idle timeout, from its welcome (0 before). */
  readonly timeoutMs: number;
  /** What `setActivity` (or a chat or typing frame) last said. */
  readonly away: boolean;
  /** Reconnect attempts since a connection last stayed live long enough. */
  readonly attempt: number;
  /** Unix ms when the next attempt starts, while waiting (else 0). */
  readonly retryAt: number;
  /** Unix ms of the current connection's welcome (0 when not live). */
  readonly liveSince: number;
  readonly lastSent: number;
  readonly lastRecv: number;
  readonly lastClose: CloseInfo | null;
  /** The connection was silenced with `silence()` and has sent nothing since. */
  readonly silenced: boolean;

  /** A copy of what is known of a channel: empty (count 0, complete false) until its snapshot, or when not joined. */
  channel(name: string): ChannelState;
  /** What the last watching or status frame said of a watched user. */
  user(uid: string): UserState;
  /** A copy of the record of a user present to this client (a member of a joined channel, a watched user online) or of its own user; else undefined. */
  record(uid: string): Record | undefined;
  /**
   * Changes the user's own mode and note, on all its connections. Sent now, or once live; resolves to the own
   * record once the server has taken it. Rejects at once (TypeError) on what the server would refuse, at the
   * server's error frame (its text names the field), when the connection ends before the server answered (the
   * change may or may not have been made: set again), and when the client closes.
   */
  set(change: SetOptions): Promise<Record>;
  /** Joins a channel (now, or once live); resolves at its snapshot, rejects at an error frame for it. */
  join(channel: string): Promise<void>;
  /** Leaves a channel; resolves when the server says so, or at once when no connection holds it. */
  leave(channel: string): Promise<void>;
  /** Replaces the watch list. */
  watch(uids: string[]): void;
  chat(channel: string, text: string): void;
  typing(channel: string): void;
  setActivity(state: 'away' | 'active'): void;
  /** Pages through a joined channel's whole member list; resolves to `complete`. Rejects at a page that breaks the rules. */
  loadMembers(channel: string): Promise<boolean>;
  /** Loads one more page; resolves to `complete`. */
  loadPage(channel: string): Promise<boolean>;
  /** Sends a frame as it is: now when live, else once live. */
  send(frame: ClientFrame): void;
  /** The demo mode's testing aid; false when not live. */
  silence(): boolean;
  /** Opens a connection now: after `close()` or a final close, or instead of waiting out the backoff. */
  connect(): void;
  /** Ends the connection for good (until `connect()`); pending joins, leaves and loads reject. */
  close(reason?: string): void;

  addEventListener<K extends keyof PresencedEventMap>(type: K, listener: PresencedListener<K>, options?: ListenerOptions): void;
  addEventListener(...args: Parameters<EventTarget['addEventListener']>): void;
  removeEventListener<K extends keyof PresencedEventMap>(type: K, listener: PresencedListener<K>, options?: boolean | { capture?: boolean }): void;
  removeEventListener(...args: Parameters<EventTarget['removeEventListener']>): void;
}

/** Close codes never retried: 4401 (token expired, unless `refreshToken` gives a new one) and 4403 (disconnected by the server side). */
export const FINAL_CLOSES: readonly number[];
/** The most code points of a note's text. */
export const MAX_NOTE_TEXT: number;
/** The most code points of a note's emoji. */
export const MAX_NOTE_EMOJI: number;
/** The default of `maxMessageBytes`. */
export const MAX_MESSAGE_BYTES: number;
/** The default of `connectTimeoutMs`. */
export const CONNECT_TIMEOUT_MS: number;
/** The wait before reconnect attempt n (0-based), in ms: 0.5 s doubling to 15 s, the upper half jittered. */
export function backoffDelay(n: number): number;
/** A JWT's `exp` in Unix ms, or 0 when it has none or is not a JWT. */
export function tokenExpiry(token: string): number;
