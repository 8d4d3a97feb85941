package browsertest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// Dashboard is fleetd's dashboard open in a tab, read the way a person
// reads it: rows, badges, the timeline, the terminal.
type Dashboard struct {
	*Tab
	// URL is the gateway's base URL (http://host:port).
	URL string
}

// OpenDashboard loads the dashboard of the gateway at url and signs in
// with token through its form; it returns once the fleet view is live.
func (b *Browser) OpenDashboard(t testing.TB, url, token string) *Dashboard {
	t.Helper()
	d := &Dashboard{Tab: b.Tab(t), URL: strings.TrimSuffix(url, "/")}
	d.Run(
		chromedp.Navigate(d.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`form.signin input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`form.signin input[name=token]`), token),
		chromedp.Click(chromedp.CSS(`form.signin button[type=submit]`)),
	)
	return d
}

// WaitLive waits until the page's stream is live.
func (d *Dashboard) WaitLive() {
	d.t.Helper()
	d.WaitFor("the stream to be live", `document.getElementById("conn").dataset.state === "live"`)
}

// OpenMember goes to a member's page and waits until its stream is live.
func (d *Dashboard) OpenMember(name string) {
	d.t.Helper()
	d.Exec(fmt.Sprintf(`location.hash = "#/m/" + encodeURIComponent(%s)`, Quote(name)))
	d.WaitFor("the member page", fmt.Sprintf(`document.querySelector("section.member h1")?.textContent === %s`, Quote(name)))
	d.WaitLive()
}

// OpenFleet goes back to the fleet view.
func (d *Dashboard) OpenFleet() {
	d.t.Helper()
	d.Exec(`location.hash = "#/"`)
	d.WaitFor("the fleet view", `!!document.querySelector(".members .rows")`)
	d.WaitLive()
}

// Row is the script expression of a member's row in the fleet view.
func Row(name string) string {
	return fmt.Sprintf(`document.querySelector('.members .row[data-name=' + JSON.stringify(%s) + ']')`, Quote(name))
}

// WaitRow waits until the fleet view shows the member with status.
func (d *Dashboard) WaitRow(name, status string) {
	d.t.Helper()
	d.WaitFor(fmt.Sprintf("member %s %s", name, status), fmt.Sprintf(`%s?.dataset.status === %s`, Row(name), Quote(status)))
}

// WaitRowText waits until the member's row shows text.
func (d *Dashboard) WaitRowText(name, text string) {
	d.t.Helper()
	d.WaitFor(fmt.Sprintf("member %s showing %q", name, text), fmt.Sprintf(`(%s?.innerText ?? "").includes(%s)`, Row(name), Quote(text)))
}

// WaitNoRow waits until the fleet view has no row for the member.
func (d *Dashboard) WaitNoRow(name string) {
	d.t.Helper()
	d.WaitFor("no row for "+name, fmt.Sprintf(`%s === null`, Row(name)))
}

// WaitPool waits until the fleet view's warm pools show the profile's
// pool with figures as they read: free of size, starting, claimed ("1 / 3",
// "2", "0").
func (d *Dashboard) WaitPool(profile string, figures ...string) {
	d.t.Helper()
	want := strings.Join(append([]string{profile}, figures...), "|")
	row := fmt.Sprintf(`document.querySelector('.pools tr[data-pool=' + JSON.stringify(%s) + ']')`, Quote(profile))
	d.WaitFor(fmt.Sprintf("pool %s showing %v", profile, figures), fmt.Sprintf(`Array.from(%s?.cells ?? [], (c) => c.textContent).join("|") === %s`, row, Quote(want)))
}

// RowsExpr is the script expression of the element holding the fleet
// view's rows.
const RowsExpr = `document.querySelector(".members .rows")`

// RowCount is how many rows the fleet view has, shown or filtered out.
func (d *Dashboard) RowCount() int {
	d.t.Helper()
	return Eval[int](d.Tab, RowsExpr+`?.children.length ?? 0`)
}

// VisibleRows are the names of the rows the filters leave shown.
func (d *Dashboard) VisibleRows() []string {
	d.t.Helper()
	return Eval[[]string](d.Tab, `Array.from(document.querySelectorAll(".members .rows .row")).filter(r => !r.hidden).map(r => r.dataset.name)`)
}

// Filter picks value in the fleet view's filter by field (status, team or
// profile); "" shows all.
func (d *Dashboard) Filter(field, value string) {
	d.t.Helper()
	d.Exec(fmt.Sprintf(`const s = document.querySelector(".filters select[name=%s]"); s.value = %s; s.dispatchEvent(new Event("change"))`, field, Quote(value)))
}

// BadHeaders reads the fleet view's column headers as laid out, and says
// of each one that does not read well how it fails: a word broken across
// lines, text wider than its cell, or a table wider than its box or the
// window.
func (d *Dashboard) BadHeaders() []string {
	d.t.Helper()
	return Eval[[]string](d.Tab, `(() => {
  const bad = [];
  for (const cell of document.querySelectorAll(".members .head [role=columnheader]")) {
    const text = cell.textContent;
    if (cell.scrollWidth > cell.clientWidth) bad.push(JSON.stringify(text) + ": text " + cell.scrollWidth + "px wide in a cell of " + cell.clientWidth + "px");
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      for (const m of node.data.matchAll(/\S+/g)) {
        const r = document.createRange();
        r.setStart(node, m.index);
        r.setEnd(node, m.index + m[0].length);
        const lines = new Set(Array.from(r.getClientRects(), c => Math.round(c.top)));
        if (lines.size > 1) bad.push(JSON.stringify(text) + ": the word " + JSON.stringify(m[0]) + " breaks across " + lines.size + " lines");
      }
    }
  }
  const table = document.querySelector(".members");
  if (table.scrollWidth > table.clientWidth) bad.push("the table is " + table.scrollWidth + "px wide in a box of " + table.clientWidth + "px");
  const page = document.documentElement;
  if (page.scrollWidth > page.clientWidth) bad.push("the page is " + page.scrollWidth + "px wide in a window of " + page.clientWidth + "px");
  return bad;
})()`)
}

// Send types a message into the member page's form and sends it; it
// returns the dispatch id the page reports.
func (d *Dashboard) Send(content string) string {
	d.t.Helper()
	d.Run(
		chromedp.SetValue(chromedp.CSS(`form.send-form textarea`), content),
		chromedp.Click(chromedp.CSS(`form.send-form button.send`)),
	)
	d.WaitFor("the message sent", `document.querySelector("form.send-form .result").textContent.startsWith("sent ")`)
	return strings.TrimPrefix(Eval[string](d.Tab, `document.querySelector("form.send-form .result").textContent`), "sent ")
}

// message is the script expression of a message's card on the timeline.
func message(id string) string {
	return fmt.Sprintf(`document.querySelector('li.msg[data-id=' + JSON.stringify(%s) + ']')`, Quote(id))
}

// WaitPhase waits until the timeline shows the message in phase.
func (d *Dashboard) WaitPhase(id, phase string) {
	d.t.Helper()
	d.WaitFor(fmt.Sprintf("message %s %s", id, phase), fmt.Sprintf(`%s?.dataset.phase === %s`, message(id), Quote(phase)))
}

// WaitStep waits until the message's timeline has step, showing text.
func (d *Dashboard) WaitStep(id, step, text string) {
	d.t.Helper()
	d.WaitFor(fmt.Sprintf("message %s step %s %q", id, step, text), fmt.Sprintf(
		`(%s?.querySelector('li.step[data-step=' + JSON.stringify(%s) + ']')?.innerText ?? "\u0000").includes(%s)`, message(id), Quote(step), Quote(text)))
}

// Steps are the steps the message's timeline shows, in order.
func (d *Dashboard) Steps(id string) []string {
	d.t.Helper()
	return Eval[[]string](d.Tab, fmt.Sprintf(`Array.from(%s?.querySelectorAll("li.step") ?? []).map(s => s.dataset.step)`, message(id)))
}

// Cancel presses the message's Cancel button.
func (d *Dashboard) Cancel(id string) {
	d.t.Helper()
	d.Run(chromedp.Click(chromedp.CSS(fmt.Sprintf(`li.msg[data-id=%q] button.cancel`, id))))
}

// HasCancel reports whether the message shows a Cancel button.
func (d *Dashboard) HasCancel(id string) bool {
	d.t.Helper()
	return Eval[bool](d.Tab, fmt.Sprintf(`!!%s?.querySelector("button.cancel")`, message(id)))
}

// WaitTerminal waits until the member page's terminal shows text.
func (d *Dashboard) WaitTerminal(text string) {
	d.t.Helper()
	d.WaitFor(fmt.Sprintf("the terminal showing %q", text), fmt.Sprintf(`(document.querySelector(".terminal .xterm-rows")?.textContent ?? "").includes(%s)`, Quote(text)))
}

// Refusal waits for the page to say the gateway refused, and returns what
// it says.
func (d *Dashboard) Refusal() string {
	d.t.Helper()
	d.WaitFor("a refusal", `!!document.querySelector(".refused")`)
	return Eval[string](d.Tab, `document.querySelector(".refused").innerText`)
}
