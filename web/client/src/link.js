// What the transports share: the link a connection drives, and how each
// opener tells what ended it.
//
// A link is one open transport, as the connection drives it:
//   open       whether a frame sent now goes out
//   send(text) sends one frame
//   close(code, reason)  ends it (with a closing handshake where there is
//                        one, after the frames sent before), and says nothing more
//   terminate()          ends it at once, and says nothing more
// Its opener feeds it to `on`: on.message(data) for each message, then one
// on.close(code, reason, final) when it ends of itself; final says a retry
// would be refused the same way. on.error(text), where the opener has it,
// tells of frames the server refused while the link stays up. The
// connection is up at the server's welcome, not when the transport opens,
// so an opener reports no open.

// Handshake refusals never retried, where the transport tells the status (a
// browser's WebSocket does not): a bad user ID, an origin or a path.
export const REFUSALS = [400, 403, 404];

// The code reported for a message over maxMessageBytes: the link ends it itself.
export const TOO_BIG = 1009;

// byteSize is the size of a message as it came, in UTF-8 bytes for text; it
// counts a long string's bytes only when its length leaves a doubt.
export function byteSize(data, limit) {
  if (typeof data === 'string') {
    if (data.length > limit || data.length * 3 <= limit) return data.length;
    let n = 0;
    for (let i = 0; i < data.length; i++) {
      const c = data.charCodeAt(i);
      n += c < 0x80 ? 1 : c < 0x800 ? 2 : c >= 0xd800 && c < 0xdc00 ? (i++, 4) : 3;
    }
    return n;
  }
  if (data && typeof data.byteLength === 'number') return data.byteLength; // ArrayBuffer, Buffer, views
  if (data && typeof data.size === 'number') return data.size; // Blob
  return 0;
}
