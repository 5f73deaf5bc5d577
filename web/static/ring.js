// RingView draws GET /api/ring as a circle of slots: slot 0 at the top,
// clockwise, the cursor as a pointer on the slot the next step scans.

const NS = 'http://www.w3.org/2000/svg';
const R_OUT = 112;
const R_IN = 82;

function el(name, attrs = {}, parent) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

// point is the spot at radius r and angle a (radians, 0 at the top, clockwise).
function point(r, a) {
  return [r * Math.sin(a), -r * Math.cos(a)];
}

function f(n) { return n.toFixed(2); }

function sector(r0, r1, a0, a1) {
  const large = a1 - a0 > Math.PI ? 1 : 0;
  const [x0, y0] = point(r1, a0);
  const [x1, y1] = point(r1, a1);
  const [x2, y2] = point(r0, a1);
  const [x3, y3] = point(r0, a0);
  return `M${f(x0)} ${f(y0)}A${r1} ${r1} 0 ${large} 1 ${f(x1)} ${f(y1)}L${f(x2)} ${f(y2)}A${r0} ${r0} 0 ${large} 0 ${f(x3)} ${f(y3)}Z`;
}

export class RingView {
  /** @param {SVGSVGElement} svg */
  constructor(svg) {
    this.svg = svg;
    this.slots = 0;
    this.turns = 0;     // whole turns the drawn cursor has made, so it never spins backwards
    this.lastCursor = -1;
  }

  build(slots) {
    this.slots = slots;
    this.svg.replaceChildren();
    const step = (2 * Math.PI) / slots;
    const pad = Math.min(0.03, step * 0.14);
    this.slotEls = [];
    this.countEls = [];
    const slotsG = el('g', { class: 'slots' }, this.svg);
    const countsG = el('g', { class: 'counts' }, this.svg);
    const showCounts = slots <= 72;
    for (let i = 0; i < slots; i++) {
      const p = el('path', { class: 'slot', d: sector(R_IN, R_OUT, i * step + pad / 2, (i + 1) * step - pad / 2) }, slotsG);
      el('title', {}, p).textContent = `slot ${i}`;
      this.slotEls.push(p);
      if (showCounts) {
        const [x, y] = point(R_OUT + 12, (i + 0.5) * step);
        const t = el('text', { class: 'count', x: f(x), y: f(y), 'text-anchor': 'middle', 'dominant-baseline': 'central' }, countsG);
        this.countEls.push(t);
      }
    }
    const [zx, zy] = point(R_IN - 10, 0.5 * step);
    el('text', { class: 'zero', x: f(zx), y: f(zy), 'text-anchor': 'middle', 'dominant-baseline': 'central' }, this.svg).textContent = '0';

    // The hand rotates as one piece: the cursor's outline and pointer, and the
    // landing slot one step behind it (the slot the cursor reaches last).
    this.hand = el('g', { class: 'hand' }, this.svg);
    el('path', { class: 'land', d: sector(R_IN - 1, R_OUT + 1, -step + pad / 2, -pad / 2) }, this.hand);
    el('path', { class: 'cursor', d: sector(R_IN - 3, R_OUT + 3, pad / 2 - 0.01, step - pad / 2 + 0.01) }, this.hand);
    const [px, py] = point(R_IN - 5, step / 2);
    const [lx, ly] = point(R_IN - 16, step / 2 - 0.08);
    const [rx, ry] = point(R_IN - 16, step / 2 + 0.08);
    el('path', { class: 'pointer', d: `M${f(px)} ${f(py)}L${f(lx)} ${f(ly)}L${f(rx)} ${f(ry)}Z` }, this.hand);

    const center = el('g', { class: 'center' }, this.svg);
    this.cursorText = el('text', { class: 'big', x: 0, y: -8, 'text-anchor': 'middle' }, center);
    this.cursorSub = el('text', { class: 'sub', x: 0, y: 12, 'text-anchor': 'middle' }, center);
    this.totalText = el('text', { class: 'sub', x: 0, y: 27, 'text-anchor': 'middle' }, center);
    this.turns = 0;
    this.lastCursor = -1;
  }

  /** update draws one reading of /api/ring: {slots, tick_ms, cursor, due}; due is absent without the key on a server that has one. */
  update(ring) {
    const slots = Number(ring.slots) | 0;
    if (slots < 2) return;
    if (slots !== this.slots) this.build(slots);
    const due = Array.isArray(ring.due) ? ring.due : [];
    const cursor = ((Number(ring.cursor) | 0) % slots + slots) % slots;
    let max = 0;
    let total = 0;
    for (let i = 0; i < slots; i++) {
      const n = Number(due[i]) || 0;
      total += n;
      if (n > max) max = n;
    }
    for (let i = 0; i < slots; i++) {
      const n = Number(due[i]) || 0;
      const p = this.slotEls[i];
      p.classList.toggle('due', n > 0);
      p.style.fillOpacity = n > 0 ? String(0.35 + 0.65 * (n / max)) : '';
      p.firstChild.textContent = `slot ${i}: ${n} connection${n === 1 ? '' : 's'} waiting`;
      if (this.countEls.length) this.countEls[i].textContent = n > 0 ? String(n) : '';
    }
    // Count forward through slot 0 so the CSS transition turns clockwise.
    if (this.lastCursor >= 0 && cursor < this.lastCursor) this.turns++;
    this.lastCursor = cursor;
    const deg = (this.turns * slots + cursor) * (360 / slots);
    this.hand.style.transform = `rotate(${deg}deg)`;
    this.cursorText.textContent = String(cursor);
    this.cursorSub.textContent = `cursor · ${slots} slots`;
    // A server with an API key keeps its counts to the key: the ring turns without them.
    this.totalText.textContent = Array.isArray(ring.due) ? `${total} connection${total === 1 ? '' : 's'}` : 'counts need the API key';
    this.svg.dataset.cursor = String(cursor);
    this.svg.dataset.total = String(total);
  }
}
