package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// TestHeldCallsPerPrincipal: one principal re-attaching to one message
// from many calls at once holds no more of them than --max-held-calls; the
// rest are refused with throttled at once, and the slots come back when
// the held calls end.
func TestHeldCallsPerPrincipal(t *testing.T) {
	const limit, calls = 4, 40
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxHeldCalls: limit})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	me := &identity.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary", Namespace: ns}

	sent := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "one message", "wait": false}))
	var refused atomic.Int32
	held := make(chan toolCall[SendOutput], calls)
	var start, done sync.WaitGroup
	start.Add(1)
	for range calls {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			got := <-async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"dispatchId": sent.DispatchID})
			if got.err != nil && got.err.Code == toolerr.Throttled {
				refused.Add(1)
				return
			}
			held <- got
		}()
	}
	start.Done()

	// Every call is held or refused; which calls win the race does not
	// matter, how many do does.
	testutil.Eventually(t, "", func() error {
		n, r := h.gw.svc.rv.held(), int(refused.Load())
		return errIf(n+r != calls, "%d calls held and %d refused of %d", n, r, calls)
	})
	if n, r := h.gw.svc.rv.held(), int(refused.Load()); n != limit || r != calls-limit {
		t.Fatalf("%d calls held and %d refused, want %d held and %d refused", n, r, limit, calls-limit)
	}
	if n := h.gw.svc.heldCalls.count(me); n != limit {
		t.Fatalf("%d held-call slots taken, want %d", n, limit)
	}

	// The message's outcome ends the held calls and gives their slots back.
	deliver(t, ns, sent.DispatchID)
	env.Settle(t, ns, sent.DispatchID, replied("done"))
	done.Wait()
	close(held)
	for got := range held {
		if got := wantOK(t, got); got.Outcome != "reply" {
			t.Fatalf("a held call ended with %+v, want the reply", got)
		}
	}
	if n := h.gw.svc.heldCalls.count(me); n != 0 {
		t.Fatalf("%d held-call slots still taken after every call returned", n)
	}
}

// openStream GETs a dashboard stream with token and returns its status
// and body; the body of a stream that opened stays open until close.
func openStream(t *testing.T, url, token string) (status int, body []byte, close func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Errorf("GET %s: %v", url, err)
		return 0, nil, func() {}
	}
	if resp.StatusCode != http.StatusOK {
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, body, func() {}
	}
	return resp.StatusCode, nil, func() { cancel(); resp.Body.Close() }
}

// TestDashboardStreamsPerPrincipal: one principal opening many dashboard
// streams at once gets --max-dashboard-streams of them and 429 with
// throttled for the rest; another principal is not affected, and a closed
// stream frees its slot.
func TestDashboardStreamsPerPrincipal(t *testing.T) {
	const limit, streams = 3, 30
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxDashboardStreams: limit})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	url := h.url + "/ui/api/members/w1"

	var mu sync.Mutex
	var open []func()
	refused := 0
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			status, body, close := openStream(t, url, staticToken)
			mu.Lock()
			defer mu.Unlock()
			switch status {
			case http.StatusOK:
				open = append(open, close)
			case http.StatusTooManyRequests:
				var got errorBody
				if err := json.Unmarshal(body, &got); err != nil || got.Error == nil || got.Error.Code != toolerr.Throttled {
					t.Errorf("429 with %s, want a throttled error", body)
				}
				refused++
			default:
				t.Errorf("GET %s: %d %s", url, status, body)
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, close := range open {
			close()
		}
	}()
	if len(open) != limit || refused != streams-limit {
		t.Fatalf("%d streams opened and %d refused, want %d and %d", len(open), refused, limit, streams-limit)
	}

	// Another principal's streams are its own.
	status, body, closeWorker := openStream(t, url, workerToken)
	if status != http.StatusOK {
		t.Fatalf("the worker's stream: %d %s", status, body)
	}
	closeWorker()

	// A closed stream gives its slot back once its request has ended.
	open[0]()
	open = open[1:]
	testutil.Eventually(t, "", func() error {
		status, body, close := openStream(t, url, staticToken)
		if status == http.StatusOK {
			open = append(open, close)
		}
		return errIf(status != http.StatusOK, "%d %s", status, body)
	})
}

// countingPanes counts the terminal reads the gateway makes.
type countingPanes struct {
	PaneReader
	reads atomic.Int64
}

func (c *countingPanes) PaneRead(ctx context.Context, p herdr.ReadParams) (*herdr.PaneRead, error) {
	c.reads.Add(1)
	return c.PaneReader.PaneRead(ctx, p)
}

// TestDashboardScreenReadsShared: however many pages show one member, its
// terminal on the pane server is read once per interval and every page
// gets the screen.
func TestDashboardScreenReadsShared(t *testing.T) {
	const pages = 10
	socket := filepath.Join(t.TempDir(), "herdr.sock")
	srv, err := paneserver.New(paneserver.Options{SocketPath: socket, Shell: "/bin/sh", Columns: 100, Rows: 20})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Close() })
	herd := herdr.NewClient(socket)
	ws, err := herd.WorkspaceCreate(context.Background(), herdr.WorkspaceCreateParams{Label: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	pane := ws.RootPane.PaneID
	panes := &countingPanes{PaneReader: herd}
	clk := testclock.NewFakeClock(time.Now())
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{Panes: panes, Clock: clk})
	w1, _ := addMember(t, member("w1", ns).Obj())
	env.SetMemberStatus(t, w1, func(st *fleetv1alpha1.MemberStatus) { st.PaneID = pane })
	testutil.Eventually(t, "the pane in the cache", func() error {
		var m fleetv1alpha1.Member
		if err := h.gw.svc.cache.Get(context.Background(), client.ObjectKeyFromObject(w1), &m); err != nil {
			return err
		}
		return errIf(m.Status.PaneID != pane, "no pane yet")
	})

	streams := make([]<-chan dashboardEvent, pages)
	for i := range streams {
		streams[i] = openDashboardEvents(t, h.url+"/ui/api/members/w1", staticToken)
		if ev, ok := nextEvent(t, streams[i], "hello", "member", "messages"); !ok || ev.name != "screen" {
			t.Fatalf("page %d: %s %s, want its first screen", i, ev.name, ev.data)
		}
	}
	// The clock has not moved: every page got the one screen read so far.
	if got := panes.reads.Load(); got != 1 {
		t.Fatalf("%d pages opened with %d terminal reads, want 1", pages, got)
	}
	if n := h.gw.dashboard.screens.count(); n != 1 {
		t.Fatalf("%d read loops for one member, want 1", n)
	}

	if err := herd.PaneSendInput(context.Background(), herdr.PaneSendInputParams{PaneID: pane, Text: "echo shared-screen", Keys: []string{"enter"}}); err != nil {
		t.Fatal(err)
	}
	waiting := map[int]bool{}
	for i := range streams {
		waiting[i] = true
	}
	steps := 0
	testutil.Eventually(t, "every page to show the new screen", func() error {
		clk.Step(screenInterval)
		steps++
		for i := range waiting {
			for drained := false; !drained; {
				select {
				case ev := <-streams[i]:
					if ev.name == "screen" && strings.Contains(string(ev.data), "shared-screen") {
						delete(waiting, i)
					}
				default:
					drained = true
				}
			}
		}
		return errIf(len(waiting) > 0, "%d pages without it", len(waiting))
	})
	if got := panes.reads.Load(); got > int64(steps)+1 {
		t.Fatalf("%d terminal reads in %d intervals for %d pages, want at most one an interval", got, steps, pages)
	}
}

// TestRevokedMemberTokenStopsAtOnce: deleting a member's token Secret stops
// its token on the next request, and ends its open dashboard stream at
// the next look at the token, a few seconds on the clock.
func TestRevokedMemberTokenStopsAtOnce(t *testing.T) {
	ns := env.Namespace(t)
	clk := testclock.NewFakeClock(time.Now())
	h := startGateway(t, ns, Options{Clock: clk})
	w1, token := addMember(t, member("w1", ns).Obj())
	h.connect(t, token, nil)
	events := openDashboardEvents(t, h.url+"/ui/api/fleet", token)
	if ev, _ := nextEvent(t, events); ev.name != "hello" {
		t.Fatalf("first event %s %s, want hello", ev.name, ev.data)
	}
	testutil.Eventually(t, "the stream's tickers on the clock", func() error { return errIf(!clk.HasWaiters(), "none") })

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w1.Name + "-fleetd-token"}}
	if err := env.Client.Delete(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the deleted Secret gone from the cache", func() error {
		err := h.gw.svc.cache.Get(context.Background(), client.ObjectKeyFromObject(secret), &corev1.Secret{})
		return errIf(!apierrors.IsNotFound(err), "still cached: %v", err)
	})
	if cs, err := h.tryConnect(token, nil); err == nil {
		cs.Close()
		t.Fatal("the token of a deleted Secret still connects")
	}
	clk.Step(5 * time.Second)
	ev, _ := nextEvent(t, events, "members", "messages", "pools")
	var refused errorBody
	if err := json.Unmarshal(ev.data, &refused); err != nil || ev.name != "error" || refused.Error == nil || refused.Error.Code != toolerr.Unauthorized {
		t.Fatalf("after the revocation: %s %s, want an unauthorized error", ev.name, ev.data)
	}
}

// TestFailedAuthenticationThrottled: many made-up tokens from one address
// at once are answered 401 only as often as the throttle's burst allows
// and 429 after, however they interleave; a valid token from the same
// address still gets in.
func TestFailedAuthenticationThrottled(t *testing.T) {
	const attempts = 60
	ns := env.Namespace(t)
	clk := testclock.NewFakeClock(time.Now())
	h := startGateway(t, ns, Options{Clock: clk})
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, h.url+"/agents", nil)
			req.Header.Set("Authorization", fmt.Sprintf("Bearer eyJhbGciOiJub25lIn0.eyJuIjo%d.c2ln", i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("GET /agents: %v", err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	want := map[int]int{http.StatusUnauthorized: identity.DefaultFailureBurst, http.StatusTooManyRequests: attempts - identity.DefaultFailureBurst}
	if err := diffErr(want, statuses); err != nil {
		t.Fatalf("answers by status: %v", err)
	}
	resp, err := httpClient(staticToken).Get(h.url + "/agents")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a valid token from the throttled address: %s", resp.Status)
	}
}
