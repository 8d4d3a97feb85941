// The fleet view: one row per member, kept by name and updated in place,
// so that a change to one member touches one row however many there are.

import { Member, Members, Pool, Pools } from "./api";
import { afterPaint, ago, clock, h, setAttr, setText, suspension } from "./dom";

interface Row {
  tr: HTMLElement;
  name: HTMLAnchorElement;
  you: HTMLElement;
  status: HTMLElement;
  since: HTMLElement;
  waiting: HTMLElement;
  agent: HTMLElement;
  queue: HTMLElement;
  inFlight: HTMLElement;
  inFlightText: HTMLElement;
  context: HTMLElement;
  contextBar: HTMLElement;
  restarts: HTMLElement;
  where: HTMLElement;
  pool: HTMLElement;
  team: HTMLElement;
  role: HTMLElement;
  profile: HTMLElement;
  m: Member;
}

type Filter = "status" | "team" | "profile";

const columns: [string, string][] = [
  ["c-name", "member"],
  ["c-status", "status"],
  ["c-agent", "agent"],
  ["c-queue num", "queue"],
  ["c-inflight", "in flight"],
  ["c-context", "context left"],
  ["c-restarts num", "restarts"],
  ["c-where", "node · pod"],
  ["c-team", "team"],
  ["c-role", "role"],
  ["c-profile", "profile"],
];
const filters: Filter[] = ["status", "team", "profile"];

let template: HTMLElement | null = null;

// rowTemplate is an empty row, in the order of columns.
function rowTemplate(): HTMLElement {
  if (!template) {
    const cell = (cls: string, ...c: (Node | string)[]) => h("div", { class: cls, role: "cell" }, ...c);
    template = h(
      "div",
      { class: "row", role: "row" },
      cell("c-name", h("a", {}), h("span", { class: "you" })),
      cell("c-status", h("span", { class: "badge" }), h("span", { class: "since" }), h("div", { class: "waiting" })),
      cell("c-agent"),
      cell("c-queue num"),
      cell("c-inflight", h("code"), h("div", { class: "excerpt" })),
      cell("c-context", h("span", { class: "meter" }, h("span", { class: "fill" })), h("span")),
      cell("c-restarts num"),
      cell("c-where", h("span"), h("div", { class: "pool-note" })),
      cell("c-team"),
      cell("c-role"),
      cell("c-profile"),
    );
  }
  return template;
}

// sinceOf is when a member's status began: its suspension, or its agent's
// latest status.
function sinceOf(m: Member): string | undefined {
  return m.suspendedAt ?? m.agentStatusSince;
}

/** PoolPanel shows the namespace's warm pools, by profile; hidden while there are none. */
class PoolPanel {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private readonly pools = new Map<string, Pool>();

  constructor() {
    const head = h("tr", {}, ...["profile", "free / size", "starting", "claimed"].map((title, i) => h("th", { scope: "col", class: i ? "num" : undefined }, title)));
    this.body = h("tbody", {});
    this.el = h("section", { class: "pools", "aria-label": "warm pools", hidden: true }, h("h2", {}, "Warm pools"), h("table", {}, h("thead", {}, head), this.body));
  }

  /** apply shows one batch from the stream. */
  apply(batch: Pools): void {
    if (batch.reset) this.pools.clear();
    for (const name of batch.removed ?? []) this.pools.delete(name);
    for (const p of batch.pools) this.pools.set(p.name, p);
    // A namespace has a few pools at most: they are drawn afresh.
    const rows = [...this.pools.values()]
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      .map((p) =>
        h(
          "tr",
          { "data-pool": p.name },
          h("td", {}, p.name),
          h("td", { class: "num" }, `${p.free} / ${p.size}`),
          h("td", { class: "num" }, String(p.starting)),
          h("td", { class: "num" }, String(p.claimed)),
        ),
      );
    this.body.replaceChildren(...rows);
    this.el.hidden = rows.length === 0;
  }
}

/** FleetView renders batches of member changes into a table. */
export class FleetView {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private readonly rows = new Map<string, Row>();
  // names is sorted: a new row goes in at its place.
  private names: string[] = [];
  private readonly selects = new Map<Filter, HTMLSelectElement>();
  private readonly search: HTMLInputElement;
  private readonly summary: HTMLElement;
  private readonly empty: HTMLElement;
  private readonly ticker: number;
  private readonly poolPanel = new PoolPanel();
  private rendered = false;

  constructor(query: URLSearchParams) {
    this.search = h("input", { type: "search", placeholder: "name", "aria-label": "filter by name", class: "name-filter" });
    this.search.value = query.get("name") ?? "";
    this.search.addEventListener("input", () => this.filtersChanged());
    const bar = h("div", { class: "filters" }, this.search);
    for (const f of filters) {
      const s = h("select", { "aria-label": `filter by ${f}`, name: f }, h("option", { value: "" }, `all ${f === "status" ? "statuses" : f + "s"}`));
      const want = query.get(f);
      if (want) {
        s.append(h("option", { value: want }, want));
        s.value = want;
      }
      s.addEventListener("change", () => this.filtersChanged());
      this.selects.set(f, s);
      bar.append(s);
    }
    this.summary = h("span", { class: "summary" });
    bar.append(this.summary);
    // Rows are grids of their own rather than a table's: a change to one
    // member lays out its row alone, and rows off screen are not laid out
    // at all (content-visibility), however many members there are.
    const head = h("div", { class: "row head", role: "row" }, ...columns.map(([cls, title]) => h("div", { role: "columnheader", class: cls }, title)));
    this.body = h("div", { class: "rows", role: "rowgroup" });
    this.empty = h("p", { class: "empty", hidden: true }, "No members to show.");
    this.el = h("section", { class: "fleet" }, this.poolPanel.el, bar, h("div", { class: "members", role: "table", "aria-label": "members" }, head, this.body), this.empty);
    this.ticker = window.setInterval(() => this.tick(), 5000);
  }

  close(): void {
    clearInterval(this.ticker);
  }

  /** apply shows one batch from the stream. */
  apply(batch: Members): void {
    if (batch.reset && !this.rendered) performance.mark("fleetd:fleet-received", { detail: { members: batch.members.length } });
    if (batch.reset) {
      this.rows.clear();
      this.names = [];
      const frag = document.createDocumentFragment();
      for (const m of batch.members) {
        const row = this.makeRow(m);
        this.rows.set(m.name, row);
        this.names.push(m.name);
        frag.append(row.tr);
      }
      this.names.sort();
      this.body.replaceChildren(frag);
    } else {
      for (const name of batch.removed ?? []) this.remove(name);
      for (const m of batch.members) this.upsert(m);
    }
    this.optionsChanged();
    this.applyFilters();
    if (batch.reset && !this.rendered) {
      this.rendered = true;
      const n = batch.members.length;
      // The benchmark reads this mark: the first full fleet, painted.
      performance.mark("fleetd:fleet-built", { detail: { members: n } });
      afterPaint(() => performance.mark("fleetd:fleet-rendered", { detail: { members: n } }));
    }
  }

  /** pools shows one batch of warm-pool changes from the stream. */
  pools(batch: Pools): void {
    this.poolPanel.apply(batch);
  }

  private upsert(m: Member): void {
    const row = this.rows.get(m.name);
    if (row) {
      this.fill(row, m);
      return;
    }
    const r = this.makeRow(m);
    this.rows.set(m.name, r);
    let lo = 0;
    let hi = this.names.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.names[mid] < m.name) lo = mid + 1;
      else hi = mid;
    }
    const next = this.names[lo];
    this.names.splice(lo, 0, m.name);
    this.body.insertBefore(r.tr, next === undefined ? null : this.rows.get(next)!.tr);
  }

  private remove(name: string): void {
    const row = this.rows.get(name);
    if (!row) return;
    row.tr.remove();
    this.rows.delete(name);
    const i = this.names.indexOf(name);
    if (i >= 0) this.names.splice(i, 1);
  }

  private makeRow(m: Member): Row {
    // Cloning one row is much cheaper than building each from scratch.
    const tr = rowTemplate().cloneNode(true) as HTMLElement;
    const [nameCell, statusCell, agent, queue, inFlightCell, contextCell, restarts, whereCell, team, role, profile] = Array.from(tr.children) as HTMLElement[];
    const row: Row = {
      tr,
      name: nameCell.children[0] as HTMLAnchorElement,
      you: nameCell.children[1] as HTMLElement,
      status: statusCell.children[0] as HTMLElement,
      since: statusCell.children[1] as HTMLElement,
      waiting: statusCell.children[2] as HTMLElement,
      agent,
      queue,
      inFlight: inFlightCell.children[0] as HTMLElement,
      inFlightText: inFlightCell.children[1] as HTMLElement,
      contextBar: contextCell.children[0].children[0] as HTMLElement,
      context: contextCell.children[1] as HTMLElement,
      restarts,
      where: whereCell.children[0] as HTMLElement,
      pool: whereCell.children[1] as HTMLElement,
      team,
      role,
      profile,
      m,
    };
    this.fill(row, m, true);
    return row;
  }

  // fill writes what changed in m into its row.
  private fill(row: Row, m: Member, fresh = false): void {
    const old = fresh ? ({} as Partial<Member>) : row.m;
    row.m = m;
    if (fresh) {
      row.tr.dataset.name = m.name;
      setText(row.name, m.name);
      row.name.href = `#/m/${encodeURIComponent(m.name)}`;
    }
    if (fresh || old.self !== m.self) setText(row.you, m.self ? " (you)" : "");
    if (fresh || old.status !== m.status || old.terminating !== m.terminating) {
      row.tr.dataset.status = m.status;
      row.status.className = `badge s-${m.status}`;
      setText(row.status, m.status);
    }
    // A suspended member counts from its suspension.
    const since = sinceOf(m);
    setText(row.since, ago(since));
    if (fresh || old.agentStatusSince !== m.agentStatusSince || old.suspendedAt !== m.suspendedAt || old.suspendedReason !== m.suspendedReason) {
      setAttr(row.since, "title", m.suspendedAt ? `suspended since ${suspension(m.suspendedAt, m.suspendedReason)}` : since ? `${m.status} since ${clock(since)}` : undefined);
    }
    setText(row.waiting, m.status === "blocked" ? m.waiting ?? "" : "");
    setText(row.agent, m.agent ?? "");
    setAttr(row.agent, "title", m.agent);
    setText(row.queue, String(m.queueDepth ?? 0));
    setText(row.inFlight, m.inFlight ?? "");
    setText(row.inFlightText, m.inFlightContent ?? "");
    if (fresh || old.contextRemainingPercent !== m.contextRemainingPercent) {
      const p = m.contextRemainingPercent;
      setText(row.context, p === null || p === undefined ? "—" : `${p}%`);
      const known = p !== null && p !== undefined;
      row.contextBar.style.setProperty("--p", known ? `${p}%` : "0%");
      row.contextBar.classList.toggle("low", known && p < 20);
      row.contextBar.parentElement!.classList.toggle("none", !known);
    }
    setText(row.restarts, m.restarts ? String(m.restarts) : "0");
    setAttr(row.restarts, "title", m.lastRestartReason);
    setText(row.where, [m.nodeName, m.podName].filter(Boolean).join(" · "));
    setText(row.pool, m.podPool ? `from pool ${m.podPool}` : "");
    setText(row.team, m.team ?? "");
    setText(row.role, m.role ?? "");
    setText(row.profile, m.profile ?? "");
  }

  private tick(): void {
    const now = Date.now();
    for (const row of this.rows.values()) if (!row.tr.hidden) setText(row.since, ago(sinceOf(row.m), now));
  }

  // optionsChanged keeps each filter's choices to the values present.
  private optionsChanged(): void {
    const present = new Map<Filter, Set<string>>(filters.map((f) => [f, new Set<string>()]));
    for (const row of this.rows.values()) {
      for (const f of filters) {
        const v = row.m[f];
        if (v) present.get(f)!.add(v);
      }
    }
    for (const f of filters) {
      const s = this.selects.get(f)!;
      const values = [...present.get(f)!];
      if (s.value) values.push(s.value);
      const want = [...new Set(values)].sort();
      const have = Array.from(s.options).slice(1).map((o) => o.value);
      if (want.join("\n") === have.join("\n")) continue;
      const keep = s.value;
      s.replaceChildren(s.options[0], ...want.map((v) => h("option", { value: v }, v)));
      s.value = keep;
    }
  }

  private filtersChanged(): void {
    const q = new URLSearchParams();
    for (const f of filters) {
      const v = this.selects.get(f)!.value;
      if (v) q.set(f, v);
    }
    if (this.search.value) q.set("name", this.search.value);
    const qs = q.toString();
    history.replaceState(null, "", qs ? `#/?${qs}` : "#/");
    this.applyFilters();
  }

  private applyFilters(): void {
    const want = filters.map((f) => [f, this.selects.get(f)!.value] as const).filter(([, v]) => v);
    const name = this.search.value.trim();
    let shown = 0;
    const counts = new Map<string, number>();
    const costs = new Map<string, number>();
    for (const row of this.rows.values()) {
      const m = row.m;
      const show = want.every(([f, v]) => m[f] === v) && (!name || m.name.includes(name));
      if (row.tr.hidden === show) row.tr.hidden = !show;
      if (show) shown++;
      counts.set(m.status, (counts.get(m.status) ?? 0) + 1);
      const [amount, currency] = (m.cost ?? "").split(" ");
      if (currency && !Number.isNaN(Number(amount))) costs.set(currency, (costs.get(currency) ?? 0) + Number(amount));
    }
    const parts = [`${this.rows.size} members`];
    if (shown !== this.rows.size) parts.push(`${shown} shown`);
    for (const s of ["working", "blocked", "idle", "suspended"]) if (counts.get(s)) parts.push(`${counts.get(s)} ${s}`);
    // What the members have cost, shown or not, per currency, to four decimals.
    for (const [currency, total] of costs) parts.push(`${Number(total.toFixed(4))} ${currency} spent`);
    setText(this.summary, parts.join(" · "));
    this.empty.hidden = shown > 0;
  }
}
