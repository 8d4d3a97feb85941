package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

// dashboardEvent is one event of a dashboard stream, as a client reads it.
type dashboardEvent struct {
	name string
	data json.RawMessage
}

// openDashboardEvents opens a dashboard stream with token and returns its events,
// which end when the stream does.
func openDashboardEvents(t *testing.T, url, token string) <-chan dashboardEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %s %s", url, resp.Status, body)
	}
	events := make(chan dashboardEvent, 64)
	go func() {
		defer close(events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var ev dashboardEvent
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = json.RawMessage(strings.TrimPrefix(line, "data: "))
			case line == "" && ev.name != "":
				events <- ev
				ev = dashboardEvent{}
			}
		}
	}()
	return events
}

// nextEvent is the stream's next event other than those named in skip.
func nextEvent(t *testing.T, events <-chan dashboardEvent, skip ...string) (dashboardEvent, bool) {
	t.Helper()
	for {
		select {
		case ev, ok := <-events:
			if ok && slices.Contains(skip, ev.name) {
				continue
			}
			return ev, ok
		case <-time.After(30 * time.Second):
			t.Fatal("no event for 30s")
		}
	}
}

// TestDashboardStreamEndsWhenItsViewerLosesItsRights: a stream resolves its
// token again on the gateway's clock; a member deleted meanwhile (its token
// dead) gets an error event and the end of the stream, and its viewer is
// gone from the gateway.
func TestDashboardStreamEndsWhenItsViewerLosesItsRights(t *testing.T) {
	ns := env.Namespace(t)
	clk := testclock.NewFakeClock(time.Now())
	h := startGateway(t, ns, Options{Clock: clk})
	lead, token := addMember(t, member("lead", ns).Team("core", fleetv1alpha1.RoleLead).Obj())
	addMember(t, member("coder", ns).Team("core", fleetv1alpha1.RoleMember).Obj())

	events := openDashboardEvents(t, h.url+"/ui/api/fleet", token)
	hello, _ := nextEvent(t, events)
	var who DashboardHello
	if err := json.Unmarshal(hello.data, &who); err != nil || hello.name != "hello" || who.Name != "lead" || who.Team != "core" || who.Screens {
		t.Fatalf("first event %s %s, want the lead's hello without screens", hello.name, hello.data)
	}
	snap, _ := nextEvent(t, events)
	var members DashboardMembers
	if err := json.Unmarshal(snap.data, &members); err != nil || !members.Reset || len(members.Members) != 2 {
		t.Fatalf("snapshot %s %s, want both of team core", snap.name, snap.data)
	}
	testutil.Eventually(t, "the stream's tickers on the clock", func() error { return errIf(!clk.HasWaiters(), "none") })

	if err := env.Client.Delete(context.Background(), lead); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the deleted member gone from the cache", func() error {
		var list fleetv1alpha1.MemberList
		if err := h.gw.svc.cache.List(context.Background(), &list); err != nil {
			return err
		}
		for _, m := range list.Items {
			if m.Name == "lead" {
				return fmt.Errorf("still cached")
			}
		}
		return nil
	})
	// Its own row goes, as any deleted member's does.
	ev, _ := nextEvent(t, events)
	var gone DashboardMembers
	if err := json.Unmarshal(ev.data, &gone); err != nil || ev.name != "members" || len(gone.Removed) != 1 || gone.Removed[0] != "lead" {
		t.Fatalf("after the delete: %s %s, want lead removed", ev.name, ev.data)
	}
	// The next look at the token, on the clock, ends the stream.
	clk.Step(rescopeInterval)
	ev, _ = nextEvent(t, events)
	var refused errorBody
	if err := json.Unmarshal(ev.data, &refused); err != nil || ev.name != "error" || refused.Error == nil || refused.Error.Code != "unauthorized" {
		t.Fatalf("after the rescope: %s %s, want an unauthorized error", ev.name, ev.data)
	}
	if ev, ok := nextEvent(t, events); ok {
		t.Fatalf("the stream goes on after its error: %s %s", ev.name, ev.data)
	}
	testutil.Eventually(t, "the viewer gone", func() error {
		return errIf(h.gw.dashboard.viewers.count() != 0, "%d viewers", h.gw.dashboard.viewers.count())
	})
}
