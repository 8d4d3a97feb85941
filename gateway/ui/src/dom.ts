// Small DOM helpers. Text from the fleet (names, dialogs, messages, replies)
// only ever goes in as textContent, never as markup.

type Child = Node | string | null | undefined | false;

/** h makes an element with attributes and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | boolean | undefined> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (k === "class") el.className = v === true ? "" : v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c);
  }
  return el;
}

/** setText sets an element's text only when it changed, so unchanged rows cost no layout. */
export function setText(el: Element, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

/** setAttr sets (or, for undefined, removes) an attribute only when it changed. */
export function setAttr(el: Element, name: string, value: string | undefined): void {
  if (value === undefined) {
    if (el.hasAttribute(name)) el.removeAttribute(name);
  } else if (el.getAttribute(name) !== value) {
    el.setAttribute(name, value);
  }
}

/** clock is a time of day with milliseconds where the time has them. */
export function clock(iso: string | undefined): string {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const pad = (n: number, w = 2) => String(n).padStart(w, "0");
  const ms = d.getMilliseconds();
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}${ms ? "." + pad(ms, 3) : ""}`;
}

/** ago is how long before now a time was, in the largest unit that fits. */
export function ago(iso: string | undefined, now = Date.now()): string {
  if (!iso) return "";
  const s = Math.max(0, Math.round((now - new Date(iso).getTime()) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

// What each reason of a member's suspension means for a message to it.
const suspensions: Record<string, string> = {
  Idle: "idle: a message resumes it",
  SuspendRequested: "spec.suspend: messages wait until it is resumed",
};

/** suspension says since when and why a member is suspended; "" for a member that is not. */
export function suspension(at: string | undefined, reason: string | undefined, now = Date.now()): string {
  if (!at) return "";
  const why = reason ? suspensions[reason] ?? reason : "";
  return `${clock(at)} (${ago(at, now)} ago)${why ? `, ${why}` : ""}`;
}

/** randomKey is an idempotency key: a retried send is sent once. */
export function randomKey(): string {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** afterPaint runs f once the browser has painted what was just changed. */
export function afterPaint(f: () => void): void {
  requestAnimationFrame(() => setTimeout(f, 0));
}
