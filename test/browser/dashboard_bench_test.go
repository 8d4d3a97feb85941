package browser

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/test/framework/browsertest"
)

// The dashboard benchmarks show a fleet of fleetSize members. Each of
// their iterations is a round of several measurements (a render takes a
// good part of a second, a probe tens of milliseconds), so that the
// default benchtime gives percentiles of more than a sample or two; their
// ns/op is the time of a round, their figures are per measurement.
const (
	fleetSize       = 500
	rendersPerRound = 5
	probesPerRound  = 100
)

// fleetOf creates n Ready, idle members in ns, a few at a time.
func fleetOf(b testing.TB, ns string, n int) []string {
	b.Helper()
	names := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				m := member(fmt.Sprintf("w%03d", i), ns).Team(fmt.Sprintf("team-%d", i%10), fleetv1alpha1.RoleMember).Obj()
				if err := env.Client.Create(context.Background(), m); err != nil {
					errs <- err
					continue
				}
				patch := fmt.Sprintf(`{"status":{"phase":"Ready","agentStatus":"idle","agentStatusSince":%q}}`, time.Now().UTC().Format(time.RFC3339))
				if err := env.Client.Status().Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
					errs <- err
				}
				names[i] = m.Name
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return names
}

// renderedIn reloads a signed-in fleet view and returns how long after the
// navigation began it showed the whole fleet, painted: the page's own
// fleetd:fleet-rendered mark.
func renderedIn(b *testing.B, d *browsertest.Dashboard, members int) time.Duration {
	b.Helper()
	d.Run(chromedp.Navigate(d.URL + "/ui/"))
	d.WaitFor("the fleet rendered", `performance.getEntriesByName("fleetd:fleet-rendered").length > 0`)
	ms := browsertest.Eval[float64](d.Tab, fmt.Sprintf(`(() => {
		const m = performance.getEntriesByName("fleetd:fleet-rendered")[0];
		if (m.detail.members !== %d) throw new Error("rendered " + m.detail.members + " members");
		return m.startTime;
	})()`, members))
	return time.Duration(ms * float64(time.Millisecond))
}

// BenchmarkDashboardRender measures how long the fleet view takes to show
// 500 members: from the start of the page's navigation to the painted
// table, the page's load, its stream, the gateway's snapshot and the
// rendering included. The baseline in the same run is the same page
// showing one member, which costs everything but the fleet's size.
func BenchmarkDashboardRender(b *testing.B) {
	big, small := env.Namespace(b), env.Namespace(b)
	hBig := startGateway(b, big, gateway.Options{})
	hSmall := startGateway(b, small, gateway.Options{})
	fleetOf(b, big, fleetSize)
	fleetOf(b, small, 1)
	browser := browsertest.Start(b)
	dBig := browser.OpenDashboard(b, hBig.url, staticToken)
	dBig.WaitLive()
	dSmall := browser.OpenDashboard(b, hSmall.url, staticToken)
	dSmall.WaitLive()

	// A first load warms the browser's caches and the gateway's.
	renderedIn(b, dBig, fleetSize)
	renderedIn(b, dSmall, 1)
	var many, one []time.Duration
	for b.Loop() {
		for range rendersPerRound {
			many = append(many, renderedIn(b, dBig, fleetSize))
			one = append(one, renderedIn(b, dSmall, 1))
		}
	}
	dBig.Screenshot("500 members")
	p50Many, p50One := percentile(many, 50), percentile(one, 50)
	b.ReportMetric(float64(len(many)), "renders")
	b.ReportMetric(ms(p50Many), "ms-render-500")
	b.ReportMetric(ms(percentile(many, 99)), "ms-render-500-p99")
	b.ReportMetric(ms(p50One), "ms-render-1")
	b.ReportMetric(float64(p50Many)/float64(p50One), "x-render-1")
}

// BenchmarkDashboardEventToScreen measures how long a member's status
// change takes to reach the screen of a fleet view showing 500 members:
// from the status write to the API server to the browser's paint of the
// changed row (p50 and p99). The baseline in the same run is the same
// write reaching the gateway's informer cache, which every view of the
// fleet waits for; the ratio is what the dashboard adds on top.
func BenchmarkDashboardEventToScreen(b *testing.B) {
	ns := env.Namespace(b)
	h := startGateway(b, ns, gateway.Options{})
	names := fleetOf(b, ns, fleetSize)
	d := browsertest.Start(b).OpenDashboard(b, h.url, staticToken)
	d.WaitLive()
	d.WaitFor("the fleet", fmt.Sprintf(`%s?.children.length === %d`, browsertest.RowsExpr, fleetSize))
	// probe resolves with the wall-clock time of the paint after the
	// member's row first shows text.
	d.Exec(`window.fleetdProbe = (name, text) => new Promise((resolve) => {
		const cell = () => document.querySelector('.members .row[data-name="' + name + '"] .waiting');
		const done = () => requestAnimationFrame(() => setTimeout(() => resolve(performance.timeOrigin + performance.now())));
		const obs = new MutationObserver(() => { if (cell().textContent === text) { obs.disconnect(); done(); } });
		obs.observe(` + browsertest.RowsExpr + `, { subtree: true, childList: true, characterData: true });
	})`)

	// The baseline: when the gateway's cache has the write.
	var mu sync.Mutex
	cached := map[string]time.Time{}
	inf, err := h.mgr.GetCache().GetInformer(context.Background(), &fleetv1alpha1.Member{})
	if err != nil {
		b.Fatal(err)
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		if m, ok := obj.(*fleetv1alpha1.Member); ok && strings.HasPrefix(m.Status.AgentMessage, "probe ") {
			mu.Lock()
			if _, seen := cached[m.Status.AgentMessage]; !seen {
				cached[m.Status.AgentMessage] = time.Now()
			}
			mu.Unlock()
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()

	var toScreen, toCache []time.Duration
	i := 0
	probe := func() {
		name, text := names[i%len(names)], fmt.Sprintf("probe %d", i)
		i++
		d.Exec(fmt.Sprintf(`window.fleetdPending = window.fleetdProbe(%s, %s)`, browsertest.Quote(name), browsertest.Quote(text)))
		m := &fleetv1alpha1.Member{}
		m.Namespace, m.Name = ns, name
		patch := fmt.Sprintf(`{"status":{"agentStatus":"blocked","agentMessage":%q}}`, text)
		wrote := time.Now()
		if err := env.Client.Status().Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			b.Fatal(err)
		}
		painted := browsertest.Await[float64](d.Tab, `window.fleetdPending`)
		toScreen = append(toScreen, time.UnixMicro(int64(painted*1000)).Sub(wrote))
		testutil.Eventually(b, "the write in the cache", func() error {
			mu.Lock()
			defer mu.Unlock()
			at, ok := cached[text]
			if ok {
				toCache = append(toCache, at.Sub(wrote))
			}
			return errIf(!ok, "not yet")
		})
	}
	for b.Loop() {
		for range probesPerRound {
			probe()
		}
	}
	d.Screenshot("after the probes")
	b.ReportMetric(ms(percentile(toScreen, 50)), "ms-to-screen-p50")
	b.ReportMetric(ms(percentile(toScreen, 99)), "ms-to-screen-p99")
	b.ReportMetric(ms(percentile(toCache, 50)), "ms-to-cache-p50")
	b.ReportMetric(ms(percentile(toCache, 99)), "ms-to-cache-p99")
	b.ReportMetric(float64(percentile(toScreen, 50))/float64(percentile(toCache, 50)), "x-to-cache-p50")
	b.ReportMetric(float64(len(toScreen)), "probes")
}

// percentile is the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
