// A member's page: its facts, its terminal (read-only, pushed by the
// gateway while the page is open), a form to send it a message, and its
// messages as a timeline.

import { Terminal } from "@xterm/xterm";
import { Hello, MemberPage, Message, Messages, Refused, Screen, Step, post } from "./api";
import { ago, clock, h, randomKey, setText, suspension } from "./dom";

// What a step is called on screen.
const stepNames: Record<string, string> = {
  created: "created",
  queued: "queued",
  delivered: "delivered",
  working: "working",
  asked: "asked",
  answered: "answered",
  withdrawn: "question withdrawn",
  cancel_requested: "cancel requested",
  replied: "replied",
  turn_done: "turn done",
  timed_out: "timed out",
  late_reply: "late reply",
  failed: "delivery failed",
  worker_gone: "worker gone",
  cancelled: "cancelled",
};

/** MemberView renders one member's page from its stream. */
export class MemberView {
  readonly el: HTMLElement;
  private readonly facts: HTMLElement;
  private readonly title: HTMLElement;
  private readonly status: HTMLElement;
  private readonly since: HTMLElement;
  private readonly waiting: HTMLElement;
  private readonly termBox: HTMLElement;
  private readonly termNote: HTMLElement;
  private readonly timeline: HTMLOListElement;
  private readonly total: HTMLElement;
  private readonly cards = new Map<string, { li: HTMLLIElement; created: number; json: string }>();
  private term: Terminal | null = null;
  private size = { cols: 0, rows: 0 };
  private screenText = "";

  constructor(
    name: string,
    private readonly token: string,
  ) {
    this.title = h("h1", {}, name);
    this.status = h("span", { class: "badge" });
    this.since = h("span", { class: "since" });
    this.waiting = h("div", { class: "waiting" });
    this.facts = h("dl", { class: "facts" });
    this.termBox = h("div", { class: "terminal", "aria-label": "terminal (read-only)" });
    this.termNote = h("p", { class: "note" }, "Connecting to the terminal…");
    this.timeline = h("ol", { class: "timeline" });
    this.total = h("p", { class: "note" });

    const content = h("textarea", { name: "content", rows: "4", placeholder: "A message for this member", required: true });
    const send = h("button", { type: "submit", class: "send" }, "Send");
    const result = h("span", { class: "result", role: "status" });
    const form = h("form", { class: "send-form" }, content, h("div", {}, send, result));
    let key = randomKey();
    content.addEventListener("input", () => (key = randomKey()));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      if (!content.value.trim()) return;
      send.disabled = true;
      setText(result, "sending…");
      post<{ dispatchId: string }>(this.token, `api/members/${encodeURIComponent(name)}/messages`, { content: content.value, idempotencyKey: key })
        .then((out) => {
          setText(result, `sent ${out.dispatchId}`);
          content.value = "";
          key = randomKey();
        })
        .catch((e: unknown) => setText(result, e instanceof Refused ? `${e.failure.code}: ${e.failure.message}` : String(e)))
        .finally(() => (send.disabled = false));
    });

    this.el = h(
      "section",
      { class: "member" },
      h("p", { class: "crumbs" }, h("a", { href: "#/" }, "← fleet")),
      h("header", { class: "member-head" }, this.title, this.status, this.since, this.waiting),
      this.facts,
      h(
        "div",
        { class: "panes" },
        h("div", { class: "term-pane" }, h("h2", {}, "Terminal"), this.termBox, this.termNote),
        h("div", { class: "msg-pane" }, h("h2", {}, "Send"), form, h("h2", {}, "Messages"), this.total, this.timeline),
      ),
    );
  }

  /** hello says what the viewer may do here. */
  hello(who: Hello): void {
    if (!who.screens) {
      this.termBox.hidden = true;
      setText(this.termNote, who.kind === "Member" ? "A member's terminal is shown to primaries only." : "This gateway has no herdr connection to read terminals with.");
    }
  }

  close(): void {
    this.term?.dispose();
  }

  member(page: MemberPage): void {
    const m = page.member;
    if (!m) {
      this.status.className = "badge s-gone";
      setText(this.status, "gone");
      setText(this.since, "");
      setText(this.waiting, "");
      this.facts.replaceChildren(h("dt", {}, "member"), h("dd", {}, "deleted, or not visible to you"));
      return;
    }
    this.status.className = `badge s-${m.status}`;
    this.el.dataset.status = m.status;
    setText(this.status, m.status);
    setText(this.since, m.suspendedAt ? `since ${clock(m.suspendedAt)}` : "");
    setText(this.waiting, m.status === "blocked" ? m.waiting ?? "" : "");
    const facts: [string, string][] = [
      ["agent", m.agent ?? ""],
      ["phase", m.phase ?? ""],
      ["since", m.agentStatusSince ? `${clock(m.agentStatusSince)} (${ago(m.agentStatusSince)} ago)` : ""],
      ["suspended", suspension(m.suspendedAt, m.suspendedReason)],
      ["queue", String(m.queueDepth ?? 0)],
      ["in flight", [m.inFlight, m.inFlightContent].filter(Boolean).join(": ")],
      ["context left", m.contextRemainingPercent === null || m.contextRemainingPercent === undefined ? "—" : `${m.contextRemainingPercent}%`],
      ["restarts", `${m.restarts ?? 0}${m.lastRestartReason ? ` (${m.lastRestartReason})` : ""}`],
      ["tokens", m.usage ?? ""],
      ["cost", m.cost ?? ""],
      ["node", m.nodeName ?? ""],
      ["pod", m.podName ?? ""],
      ["warm pool", m.podPool ?? ""],
      ["team", m.team ?? ""],
      ["role", m.role ?? ""],
      ["profile", m.profile ?? ""],
      ["pane", m.paneId ?? ""],
    ];
    this.facts.replaceChildren(...facts.filter(([, v]) => v !== "").flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-fact": k }, v)]));
  }

  messages(batch: Messages): void {
    if (batch.reset) {
      this.cards.clear();
      this.timeline.replaceChildren();
    }
    for (const id of batch.removed ?? []) {
      this.cards.get(id)?.li.remove();
      this.cards.delete(id);
    }
    for (const msg of batch.messages) this.upsert(msg);
    if (batch.reset) {
      const shown = this.cards.size;
      setText(this.total, batch.total && batch.total > shown ? `The latest ${shown} of ${batch.total} messages.` : shown ? "" : "No messages yet.");
    } else if (this.cards.size) {
      setText(this.total, "");
    }
  }

  private upsert(msg: Message): void {
    const json = JSON.stringify(msg);
    const have = this.cards.get(msg.dispatchId);
    if (have?.json === json) return;
    const li = this.card(msg);
    if (have) {
      have.li.replaceWith(li);
      have.li = li;
      have.json = json;
      return;
    }
    // Newest first: before the first card created earlier.
    const created = msg.steps[0]?.at ? new Date(msg.steps[0].at).getTime() : 0;
    let before: Element | null = null;
    for (const el of this.timeline.children) {
      const c = this.cards.get((el as HTMLElement).dataset.id ?? "");
      if (c && c.created < created) {
        before = el;
        break;
      }
    }
    this.cards.set(msg.dispatchId, { li, created, json });
    this.timeline.insertBefore(li, before);
  }

  private card(msg: Message): HTMLLIElement {
    const created = msg.steps[0]?.at ? new Date(msg.steps[0].at).getTime() : NaN;
    const steps = h("ol", { class: "steps" }, ...msg.steps.map((s) => this.step(s, created)));
    const head = h(
      "div",
      { class: "msg-head" },
      h("span", { class: `badge p-${msg.phase}` }, msg.phase),
      h("code", { class: "id" }, msg.dispatchId),
      h("span", { class: "from" }, msg.fromYou ? "from you" : `from ${msg.fromKind} ${msg.fromName}`),
      h("span", { class: "mode" }, msg.wait ? "held" : "detached"),
    );
    if (msg.cancellable) {
      const cancel = h("button", { type: "button", class: "cancel" }, "Cancel");
      const out = h("span", { class: "result", role: "status" });
      cancel.addEventListener("click", () => {
        cancel.disabled = true;
        setText(out, "cancelling…");
        post<{ outcome: string; text?: string }>(this.token, `api/messages/${encodeURIComponent(msg.dispatchId)}/cancel`, {})
          .then((r) => setText(out, r.outcome))
          .catch((e: unknown) => {
            cancel.disabled = false;
            setText(out, e instanceof Refused ? `${e.failure.code}: ${e.failure.message}` : String(e));
          });
      });
      head.append(cancel, out);
    }
    const content = h("pre", { class: "content" }, msg.content + (msg.contentTruncated ? "\n…" : ""));
    const usage = msg.usage ? h("p", { class: "msg-usage" }, msg.usage + (msg.cost ? ` · ${msg.cost}` : "")) : null;
    return h("li", { class: "msg", "data-id": msg.dispatchId, "data-phase": msg.phase }, head, content, usage, steps);
  }

  private step(s: Step, created: number): HTMLLIElement {
    const at = s.at ? new Date(s.at).getTime() : NaN;
    let offset = "";
    if (!Number.isNaN(at) && !Number.isNaN(created) && s.step !== "created") {
      // The API keeps whole seconds for every step but the creation: such
      // a step is as far from the creation as their seconds are.
      offset = at % 1000 === 0 ? `+${Math.max(0, at / 1000 - Math.floor(created / 1000))}s` : `+${(Math.max(0, at - created) / 1000).toFixed(1)}s`;
    }
    return h(
      "li",
      { class: "step", "data-step": s.step },
      h("span", { class: "step-name" }, stepNames[s.step] ?? s.step),
      h("time", { datetime: s.at }, s.at ? clock(s.at) : "time unknown"),
      offset ? h("span", { class: "offset" }, offset) : null,
      s.text ? h("pre", { class: "step-text" }, s.text) : null,
    );
  }

  /** screen shows the terminal as it is now. */
  screen(s: Screen): void {
    if (s.unavailable) {
      setText(this.termNote, s.unavailable);
      this.termBox.classList.add("off");
      return;
    }
    setText(this.termNote, s.paneId ? `pane ${s.paneId}, read-only` : "");
    this.termBox.classList.remove("off");
    if (s.text === this.screenText && this.term) return;
    this.screenText = s.text;
    const lines = s.text.replace(/\n+$/, "").split("\n");
    const rows = Math.min(Math.max(lines.length, 12), 200);
    const cols = Math.min(Math.max(80, ...lines.map((l) => l.length)), 400);
    if (!this.term) {
      this.term = new Terminal({ disableStdin: true, cursorInactiveStyle: "none", cols, rows, scrollback: 0, fontSize: 13, convertEol: true });
      this.term.open(this.termBox);
      this.size = { cols, rows };
    } else if (cols !== this.size.cols || rows !== this.size.rows) {
      this.term.resize(cols, rows);
      this.size = { cols, rows };
    }
    // Home, clear, hide the cursor, then the screen.
    this.term.write("\x1b[H\x1b[2J\x1b[?25l" + lines.join("\r\n"));
  }
}
