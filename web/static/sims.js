// The simulated clients: connections this page opens as other users, to show
// joins, away, silence and the server's idle timeout without a second window.
// Each is a Presenced client with no token, so they need a server in demo mode.

import { Presenced } from './presenced.js';
import { fmtDur, randomTag, socketURL } from './format.js';
import { $, LOBBY, MAX_SIMS, closeText, live, logEvent, page, render, renderSoon, sims, syncChildren, tickMs, timeoutMs, ui } from './state.js';

const MAX_SPAWN = 100; // per click
const simTag = randomTag();
let simSeq = 0;

function spawn(n) {
  if (page.mode !== 'demo') {
    logEvent('error', '', 'simulated clients have no token: they need a server in demo mode (no -jwt-secret)');
    return;
  }
  const room = MAX_SIMS - sims.length;
  if (room <= 0) {
    logEvent('error', '', `at most ${MAX_SIMS} simulated clients per page`);
    return;
  }
  n = Math.max(1, Math.min(n | 0 || 1, MAX_SPAWN, room));
  for (let i = 0; i < n; i++) {
    // Not reconnected: a simulated client closed stays closed until Bring back.
    const client = new Presenced({ url: socketURL({}), uid: `sim-${simTag}-${++simSeq}`, channels: [LOBBY], reconnect: false });
    const sim = { client, idleLogged: false };
    client.addEventListener('state', (ev) => {
      if (ev.detail.state === 'closed' && client.lastClose) logEvent('closed', client.uid, `connection closed: ${closeText(client.lastClose)}`);
      renderSoon();
    });
    client.addEventListener('error', (ev) => {
      const d = ev.detail;
      logEvent('error', client.uid, `server: ${d.error}` + (d.channel ? ` (${d.channel})` : ''));
    });
    sims.push(sim);
  }
}

function silence(sim) {
  if (sim.client.silence()) {
    sim.idleLogged = false;
    logEvent('silenced', sim.client.uid, 'stops sending; the server will ignore its pongs');
  }
}

function setAway(sim) {
  const c = sim.client;
  if (!live(c)) return;
  c.setActivity(c.away ? 'active' : 'away');
  logEvent(c.away ? 'away' : 'active', c.uid, c.away ? 'says it is away' : 'says it is back');
}

// toggleDnd puts a simulated client in do not disturb, or back online: the
// member list shows its badge without a second window.
function toggleDnd(sim) {
  const c = sim.client;
  if (!live(c)) return;
  const mode = c.record(c.uid)?.mode === 'dnd' ? 'online' : 'dnd';
  c.set({ mode }).then(
    () => { logEvent('status', c.uid, mode === 'dnd' ? 'is now do not disturb' : 'is now online'); renderSoon(); },
    (err) => logEvent('error', c.uid, `status not changed: ${err.message}`),
  );
}

// bringBack sends a keepalive on a silenced socket that is still open, or reconnects.
function bringBack(sim) {
  const c = sim.client;
  sim.idleLogged = false;
  logEvent('back', c.uid, live(c) ? 'sends a ping again' : 'reconnects');
  if (live(c)) c.send({ type: 'ping' });
  else c.connect();
}

export function removeSim(sim) {
  sim.client.close('removed from the page');
  sims.splice(sims.indexOf(sim), 1);
}

// simView describes a simulated client now: its state for CSS and tests, a
// sentence, and how much of the timeout is left since its last keepalive.
function simView(sim, now) {
  const c = sim.client;
  const t = timeoutMs();
  if (c.state === 'closed' || c.state === 'waiting') {
    return { state: 'closed', text: `closed ${closeText(c.lastClose)}`, life: 0 };
  }
  if (!live(c)) return { state: 'connecting', text: 'connecting…', life: 1 };
  const age = now - c.lastSent;
  const life = t ? Math.max(0, 1 - age / t) : 1;
  if (!c.silenced) return { state: 'live', text: `${c.away ? 'away' : 'live'} · keepalive ${fmtDur(age)} ago`, life };
  if (!t || age < t / 2) {
    return { state: 'silenced', text: `silenced ${fmtDur(age)} ago · idle at ${fmtDur(t / 2)}`, life };
  }
  const left = t + tickMs() - age;
  const drop = left > 0 ? `closed within ${fmtDur(left)}` : 'due now';
  return { state: 'idle', text: `idle ${fmtDur(age)} · pinged, pongs ignored · ${drop}`, life };
}

export function renderSims(now) {
  const rows = new Map();
  for (const li of ui.sims.children) rows.set(li.dataset.uid, li);
  const t = timeoutMs();
  const order = [];
  let live = 0;
  for (const sim of sims) {
    const c = sim.client;
    const v = simView(sim, now);
    if (v.state !== 'closed') live++;
    if (v.state === 'idle' && !sim.idleLogged) {
      sim.idleLogged = true;
      logEvent('idle', c.uid, `silent for ${fmtDur(t / 2)}, half the timeout: the server pings it now (idle by this page's clock)`);
    }
    let li = rows.get(c.uid);
    if (!li) li = simRow(c.uid);
    rows.delete(c.uid);
    li.dataset.state = v.state;
    li.querySelector('.status').textContent = v.text;
    li.querySelector('.life').style.setProperty('--life', v.life.toFixed(3));
    const canSilence = v.state === 'live';
    const silenceBtn = li.querySelector('[data-act="silence"]');
    silenceBtn.hidden = !canSilence;
    li.dataset.away = String(c.away);
    // Saying so is a data frame, which would end a silence: only live ones.
    const awayBtn = li.querySelector('[data-act="away"]');
    awayBtn.hidden = !canSilence;
    awayBtn.textContent = c.away ? 'Back' : 'Away';
    const dnd = c.record(c.uid)?.mode === 'dnd';
    li.dataset.mode = dnd ? 'dnd' : 'online';
    const dndBtn = li.querySelector('[data-act="dnd"]');
    dndBtn.hidden = !canSilence;
    dndBtn.textContent = dnd ? 'Online' : 'DND';
    dndBtn.title = dnd ? 'Back online' : 'Do not disturb';
    li.querySelector('[data-act="back"]').hidden = canSilence || v.state === 'connecting';
    order.push(li);
  }
  syncChildren(ui.sims, order);
  ui.simsEmpty.hidden = sims.length > 0;
  ui.simsCount.textContent = sims.length ? `${live} connected of ${sims.length}` : '';
}

function simRow(simUid) {
  const li = document.createElement('li');
  li.className = 'sim';
  li.dataset.uid = simUid;
  li.title = simUid; // the ID is cut with an ellipsis in a narrow column
  li.innerHTML = '<span class="state-dot"></span><div class="main"><code class="uid"></code><span class="status"></span>' +
    '<span class="life"><span></span></span></div><div class="btns">' +
    '<button type="button" class="small-btn" data-act="away">Away</button>' +
    '<button type="button" class="small-btn" data-act="dnd">DND</button>' +
    '<button type="button" class="small-btn" data-act="silence">Silence</button>' +
    '<button type="button" class="small-btn" data-act="back">Bring back</button>' +
    '<button type="button" class="small-btn icon" data-act="remove" aria-label="Remove" title="Remove">×</button></div>';
  li.querySelector('.uid').textContent = simUid;
  return li;
}

ui.sims.addEventListener('click', (ev) => {
  const btn = ev.target.closest('button[data-act]');
  if (!btn) return;
  const sim = sims.find((s) => s.client.uid === btn.closest('li').dataset.uid);
  if (!sim) return;
  if (btn.dataset.act === 'away') setAway(sim);
  else if (btn.dataset.act === 'dnd') toggleDnd(sim);
  else if (btn.dataset.act === 'silence') silence(sim);
  else if (btn.dataset.act === 'back') bringBack(sim);
  else removeSim(sim);
  render();
});

$('spawn-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  spawn(Number(ui.spawnN.value));
  render();
});

$('silence-one').addEventListener('click', () => {
  const sim = sims.find((s) => live(s.client) && !s.client.silenced);
  if (sim) silence(sim);
  else logEvent('error', '', 'no live simulated client to silence: spawn some first');
  render();
});

$('close-sims').addEventListener('click', () => {
  for (const sim of [...sims]) removeSim(sim);
  render();
});

