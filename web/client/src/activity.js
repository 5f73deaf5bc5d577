// Typing and activity: what the user does, as the server counts it.

// activityFrame says this connection is 'away' or 'active'.
export function activityFrame(state) {
  if (state !== 'away' && state !== 'active') throw new TypeError(`presenced: activity is 'away' or 'active', not ${JSON.stringify(state)}`);
  return { type: 'activity', state };
}

export const typingFrame = (channel) => ({ type: 'typing', channel });

// awayAfter is whether the connection is away once frame is sent: chat,
// typing and set make the server count it active.
export function awayAfter(frame, away) {
  if (frame.type === 'chat' || frame.type === 'typing' || frame.type === 'set') return false;
  if (frame.type === 'activity') return frame.state === 'away';
  return away;
}
