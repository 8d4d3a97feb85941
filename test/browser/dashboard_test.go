package browser

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
	"github.com/fleetd/fleetd/test/framework/browsertest"
)

// The dashboard in a real browser (headless Chromium) against a real
// gateway on a real API server. Delegations move through their phases by
// settle, as the controller would move them.

// ready makes a member Ready with an agent status, as its controller would.
func ready(status fleetv1alpha1.AgentStatus, more ...func(*fleetv1alpha1.MemberStatus)) func(*fleetv1alpha1.MemberStatus) {
	return func(st *fleetv1alpha1.MemberStatus) {
		st.Phase, st.AgentStatus = fleetv1alpha1.MemberReady, status
		now := metav1.Now()
		st.AgentStatusSince = &now
		for _, f := range more {
			f(st)
		}
	}
}

// memberPage runs a gateway with opts and a member w1 Ready in status, and
// opens w1's page in a browser signed in as the primary.
func memberPage(t *testing.T, opts gateway.Options, status fleetv1alpha1.AgentStatus, more ...func(*fleetv1alpha1.MemberStatus)) (string, *harness, *fleetv1alpha1.Member, *browsertest.Dashboard) {
	t.Helper()
	ns := env.Namespace(t)
	h := startGateway(t, ns, opts)
	w1, _ := addMember(t, member("w1", ns).Obj())
	env.SetMemberStatus(t, w1, ready(status, more...))
	d := browsertest.Start(t).OpenDashboard(t, h.url, staticToken)
	d.OpenMember("w1")
	return ns, h, w1, d
}

// TestDashboardShowsTheFleetLive: members appear as they are applied, each
// change to one shows in its row, the filters narrow the rows, and a
// deleted member's row goes.
func TestDashboardShowsTheFleetLive(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, gateway.Options{})
	env.Create(t, caches, testutil.MakeProfile("claude-api", ns).Agent(fleetv1alpha1.AgentClaude).Obj())
	w1, _ := addMember(t, member("w1", ns).Team("core", fleetv1alpha1.RoleLead).Obj())

	d := browsertest.Start(t).OpenDashboard(t, h.url, staticToken)
	d.WaitLive()
	d.WaitRow("w1", "pending")
	d.WaitRowText("w1", "true") // the command it runs

	// Applied while the page is open.
	w2, _ := addMember(t, testutil.MakeMember("w2", ns).Profile("claude-api").Team("web", fleetv1alpha1.RoleMember).Obj())
	d.WaitRow("w2", "pending")
	d.WaitRowText("w2", "claude")
	env.SetMemberStatus(t, w2, ready(fleetv1alpha1.AgentWorking, func(st *fleetv1alpha1.MemberStatus) {
		st.ContextRemainingPercent = ptr.To[int32](42)
		st.Restarts = 2
		st.NodeName, st.PodName = "node-a", "w2-7f9c"
		st.Usage = &fleetv1alpha1.MemberUsage{TokenUsage: fleetv1alpha1.TokenUsage{InputTokens: 1000, OutputTokens: 40, Calls: 1}, Cost: "0.0125", Currency: "USD"}
	}))
	d.WaitRow("w2", "working")
	d.WaitFor("the fleet's cost in the summary", `document.querySelector(".summary")?.textContent.includes("0.0125 USD spent")`)
	d.WaitRowText("w2", "42%")
	d.WaitRowText("w2", "node-a · w2-7f9c")
	env.SetMemberStatus(t, w1, ready(fleetv1alpha1.AgentBlocked, func(st *fleetv1alpha1.MemberStatus) {
		st.AgentMessage = "Allow Bash(rm -rf build)? 1. Yes 2. No"
	}))
	d.WaitRow("w1", "blocked")
	d.WaitRowText("w1", "Allow Bash(rm -rf build)?")

	// A message queued for w1 shows in its queue.
	env.Create(t, caches, testutil.MakeDelegation("for-w1", ns, "w1", "build it").Detached().Obj())
	d.WaitFor("w1's queue of 1", browsertest.Row("w1")+`?.querySelector(".c-queue").textContent === "1"`)
	d.Screenshot("fleet")

	d.Filter("team", "core")
	if got := d.VisibleRows(); !slices.Equal(got, []string{"w1"}) {
		t.Errorf("team core shows %v, want [w1]", got)
	}
	d.Filter("team", "")
	d.Filter("status", "working")
	if got := d.VisibleRows(); !slices.Equal(got, []string{"w2"}) {
		t.Errorf("status working shows %v, want [w2]", got)
	}
	d.Filter("status", "")
	d.Filter("profile", "claude-api")
	if got := d.VisibleRows(); !slices.Equal(got, []string{"w2"}) {
		t.Errorf("profile claude-api shows %v, want [w2]", got)
	}
	d.Filter("profile", "")

	if err := env.Client.Delete(context.Background(), w2); err != nil {
		t.Fatal(err)
	}
	d.WaitNoRow("w2")
	if got := d.VisibleRows(); !slices.Equal(got, []string{"w1"}) {
		t.Errorf("after deleting w2 the page shows %v", got)
	}
}

// TestDashboardShowsWarmPoolsAndSuspendedMembers: the fleet view's warm
// pools follow their Profiles' status; a suspended member reads as
// suspended, and since when, in its row and on its page; a member in a Pod
// claimed from a pool says which.
func TestDashboardShowsWarmPoolsAndSuspendedMembers(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, gateway.Options{})
	pooled := testutil.MakeProfile("pooled", ns).Command("true").WarmPool(3).Obj()
	env.Create(t, caches, pooled)
	env.SetProfileStatus(t, pooled, func(st *fleetv1alpha1.ProfileStatus) {
		st.WarmPool = &fleetv1alpha1.WarmPoolStatus{Free: 1, Starting: 2}
	})
	claimed := testutil.MakeMember("claimed", ns).Profile("pooled").Obj()
	asleep := member("asleep", ns).Obj()
	env.Create(t, caches, claimed, asleep)
	env.SetMemberStatus(t, claimed, ready(fleetv1alpha1.AgentIdle, func(st *fleetv1alpha1.MemberStatus) {
		st.PodName, st.PodPool = "pooled-warm-x7k2q", "pooled"
	}))
	suspendedAt := metav1.NewTime(time.Now().Add(-2 * time.Hour))
	env.SetMemberStatus(t, asleep, func(st *fleetv1alpha1.MemberStatus) {
		st.Phase, st.SuspendedAt = fleetv1alpha1.MemberSuspended, &suspendedAt
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonIdle, Message: "idle for 30m"})
	})

	d := browsertest.Start(t).OpenDashboard(t, h.url, staticToken)
	d.WaitLive()
	d.WaitPool("pooled", "1 / 3", "2", "0")
	env.SetProfileStatus(t, pooled, func(st *fleetv1alpha1.ProfileStatus) {
		st.WarmPool = &fleetv1alpha1.WarmPoolStatus{Free: 2, Starting: 1, Claimed: 1}
	})
	d.WaitPool("pooled", "2 / 3", "1", "1")
	d.WaitRow("asleep", "suspended")
	d.WaitRowText("asleep", "2h")
	d.WaitRowText("claimed", "from pool pooled")
	d.Screenshot("warm pools")

	d.OpenMember("asleep")
	d.WaitFor("since when it is suspended", `document.querySelector(".member-head .since")?.textContent.startsWith("since ")`)
	d.WaitFor("why it is suspended", `document.querySelector('[data-fact="suspended"]')?.textContent.endsWith("(2h ago), idle: a message resumes it")`)
	d.Screenshot("suspended member")
}

// TestDashboardFleetTableReadsWell: from a 1024 px window up, the fleet
// table's headers break only between words and fit their cells, and the
// table fits the window; the screenshots show it at each width.
func TestDashboardFleetTableReadsWell(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, gateway.Options{})
	env.Create(t, caches, testutil.MakeProfile("claude-api", ns).Agent(fleetv1alpha1.AgentClaude).Obj())
	w1, _ := addMember(t, member("reviewer-frontend", ns).Team("core", fleetv1alpha1.RoleLead).Obj())
	w2, _ := addMember(t, testutil.MakeMember("w2", ns).Profile("claude-api").Team("web", fleetv1alpha1.RoleMember).Obj())
	env.SetMemberStatus(t, w2, ready(fleetv1alpha1.AgentWorking, func(st *fleetv1alpha1.MemberStatus) {
		st.ContextRemainingPercent = ptr.To[int32](42)
		st.Restarts = 12
		st.NodeName, st.PodName = "node-a", "w2-7f9c"
	}))
	env.SetMemberStatus(t, w1, ready(fleetv1alpha1.AgentBlocked, func(st *fleetv1alpha1.MemberStatus) {
		st.AgentMessage = "Allow Bash(rm -rf build)? 1. Yes 2. No"
	}))
	env.Create(t, caches, testutil.MakeDelegation("for-w2", ns, "w2", "build it").Detached().Obj())

	d := browsertest.Start(t).OpenDashboard(t, h.url, staticToken)
	d.WaitLive()
	d.WaitRow("reviewer-frontend", "blocked")
	d.WaitRow("w2", "working")
	d.WaitFor("w2's queue of 1", browsertest.Row("w2")+`?.querySelector(".c-queue").textContent === "1"`)
	for _, width := range []int64{1024, 1440} {
		d.Resize(width, 800)
		d.Screenshot(fmt.Sprintf("fleet-%d", width))
		for _, bad := range d.BadHeaders() {
			t.Errorf("at %d px: %s", width, bad)
		}
	}
}

// TestDashboardFollowsAMessageThroughItsPhases: a message sent with the
// page's Send button is a Delegation like bridge_send's, and its timeline
// shows each step as the controller takes it, with the question, the
// answer and the reply.
func TestDashboardFollowsAMessageThroughItsPhases(t *testing.T) {
	ns, _, _, d := memberPage(t, gateway.Options{}, fleetv1alpha1.AgentIdle, func(st *fleetv1alpha1.MemberStatus) {
		st.Usage = &fleetv1alpha1.MemberUsage{TokenUsage: fleetv1alpha1.TokenUsage{InputTokens: 1000, OutputTokens: 40, CachedTokens: 2000, Calls: 1}, Cost: "0.0125", Currency: "USD"}
	})
	// The member's facts say what its agent used and cost.
	d.WaitFor("the member's tokens", `document.querySelector('[data-fact="tokens"]')?.textContent === "1 call · 1000 in · 40 out · 2000 cached"`)
	d.WaitFor("the member's cost", `document.querySelector('[data-fact="cost"]')?.textContent === "0.0125 USD"`)
	id := d.Send("fix the build\nand say what broke")
	d.WaitStep(id, "queued", "")
	sent := env.Delegation(t, ns, id)
	want := fleetv1alpha1.DelegationSpec{From: fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary"}, To: "w1", Content: "fix the build\nand say what broke", Wait: ptr.To(false)}
	if diff := cmp.Diff(want, sent.Spec, cmpIgnoreTimeout); diff != "" {
		t.Errorf("the Delegation Send made (-want +got):\n%s", diff)
	}
	d.Screenshot("queued")

	env.Settle(t, ns, id, typed)
	d.WaitPhase(id, "Delivered")
	d.WaitStep(id, "delivered", "")
	env.Settle(t, ns, id, pickedUp)
	d.WaitPhase(id, "Working")
	d.Screenshot("working")
	env.Settle(t, ns, id, func(d *fleetv1alpha1.Delegation, now time.Time) {
		if _, err := delegation.Ask(d, now, "which branch?"); err != nil {
			panic(err)
		}
	})
	d.WaitPhase(id, "Asking")
	d.WaitStep(id, "asked", "which branch?")
	env.Settle(t, ns, id, func(d *fleetv1alpha1.Delegation, now time.Time) {
		if _, err := delegation.Answer(d, now, delegation.TurnID(d.Name, 1), "main"); err != nil {
			panic(err)
		}
	})
	d.WaitStep(id, "answered", "main")
	env.Settle(t, ns, id, replied("fixed: a missing import"))
	d.WaitPhase(id, "Replied")
	d.WaitStep(id, "replied", "fixed: a missing import")
	// The turn's tokens, as the member's controller counts them.
	env.Settle(t, ns, id, func(d *fleetv1alpha1.Delegation, _ time.Time) {
		d.Status.Usage = &fleetv1alpha1.DelegationUsage{TokenUsage: fleetv1alpha1.TokenUsage{InputTokens: 500, OutputTokens: 20, CachedTokens: 100, Calls: 2}, Cost: "0.0019", Currency: "USD"}
	})
	d.WaitFor("the message's tokens", `document.querySelector('li.msg[data-id="`+id+`"] .msg-usage')?.textContent === "2 calls · 500 in · 20 out · 100 cached · 0.0019 USD"`)
	d.Screenshot("replied")
	if got, want := d.Steps(id), []string{"created", "queued", "delivered", "working", "asked", "answered", "replied"}; !slices.Equal(got, want) {
		t.Errorf("steps %v, want %v", got, want)
	}
	if d.HasCancel(id) {
		t.Error("a settled message still offers Cancel")
	}
}

// cmpIgnoreTimeout leaves out what bridge_send fills in for a deadline,
// and the key the page makes so that a retried send is sent once.
var cmpIgnoreTimeout = cmp.FilterPath(func(p cmp.Path) bool {
	return p.Last().String() == ".TimeoutSeconds" || p.Last().String() == ".IdempotencyKey"
}, cmp.Ignore())

// TestDashboardCancels: the Cancel button does what bridge_cancel does: a
// queued message is withdrawn at once; one in the member's hands shows its
// cancel requested until the injector has interrupted the turn.
func TestDashboardCancels(t *testing.T) {
	ns, _, _, d := memberPage(t, gateway.Options{}, fleetv1alpha1.AgentWorking)
	queued := d.Send("never mind")
	d.WaitStep(queued, "queued", "")
	d.Cancel(queued)
	d.WaitPhase(queued, "Cancelled")
	d.WaitStep(queued, "cancelled", "")
	if got := env.Delegation(t, ns, queued).Status.Phase; got != fleetv1alpha1.DelegationCancelled {
		t.Errorf("the cancelled message is %s in the API", got)
	}
	if d.HasCancel(queued) {
		t.Error("a cancelled message still offers Cancel")
	}

	working := d.Send("a long job")
	env.Settle(t, ns, working, typed, pickedUp)
	d.WaitPhase(working, "Working")
	d.Cancel(working)
	d.WaitStep(working, "cancel_requested", "")
	d.Screenshot("cancel requested")
	if !delegation.CancelRequested(env.Delegation(t, ns, working)) {
		t.Error("Cancel did not request the cancel in the API")
	}
	// The injector interrupts the turn and settles it.
	env.Settle(t, ns, working, func(d *fleetv1alpha1.Delegation, now time.Time) { delegation.Cancel(d, now, "withdrawn by its sender") })
	d.WaitPhase(working, "Cancelled")
	d.WaitFor("the button's answer", `document.querySelector('li.msg[data-id=`+browsertest.Quote(working)+`] .result')?.textContent === "cancelled" || !document.querySelector('li.msg[data-id=`+browsertest.Quote(working)+`] button.cancel')`)
	d.Screenshot("cancelled")
}

// countingPanes counts the terminal reads the gateway makes.
type countingPanes struct {
	gateway.PaneReader
	reads atomic.Int64
}

func (c *countingPanes) PaneRead(ctx context.Context, p herdr.ReadParams) (*herdr.PaneRead, error) {
	c.reads.Add(1)
	return c.PaneReader.PaneRead(ctx, p)
}

// TestDashboardTerminalAndAClosedTab: a member page shows the member's
// pane in a read-only terminal, pushed as it changes; closing the tab ends
// everything the page cost the gateway: its stream, its goroutine, its
// terminal reads.
func TestDashboardTerminalAndAClosedTab(t *testing.T) {
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
	_, h, w1, d := memberPage(t, gateway.Options{Panes: panes}, fleetv1alpha1.AgentIdle, func(st *fleetv1alpha1.MemberStatus) { st.PaneID = pane })
	if err := herd.PaneSendInput(context.Background(), herdr.PaneSendInputParams{PaneID: pane, Text: "echo typed-into-the-pane", Keys: []string{"enter"}}); err != nil {
		t.Fatal(err)
	}
	d.WaitTerminal("typed-into-the-pane")
	if err := herd.PaneSendInput(context.Background(), herdr.PaneSendInputParams{PaneID: pane, Text: "echo and-then-more", Keys: []string{"enter"}}); err != nil {
		t.Fatal(err)
	}
	d.WaitTerminal("and-then-more")
	d.Screenshot("terminal")
	if h.gw.DashboardStreams() != 1 {
		t.Errorf("%d viewers open, want 1", h.gw.DashboardStreams())
	}

	d.Close()
	testutil.Eventually(t, "the page's stream to end", func() error {
		if n := h.gw.DashboardStreams(); n != 0 {
			return fmt.Errorf("%d viewers still open", n)
		}
		if g := streamGoroutines(); g != "" {
			return fmt.Errorf("a stream's goroutine is left:\n%s", g)
		}
		return nil
	})
	// The terminal was read for the page alone, and its read loop is gone:
	// a change to the member, which would wake a stream, reads nothing.
	reads := panes.reads.Load()
	env.SetMemberStatus(t, w1, func(st *fleetv1alpha1.MemberStatus) { st.AgentStatus = fleetv1alpha1.AgentWorking })
	testutil.Eventually(t, "the change in the cache", func() error {
		var m fleetv1alpha1.Member
		if err := h.mgr.GetCache().Get(context.Background(), client.ObjectKeyFromObject(w1), &m); err != nil {
			return err
		}
		return errIf(m.Status.AgentStatus != fleetv1alpha1.AgentWorking, "still %s", m.Status.AgentStatus)
	})
	if got := panes.reads.Load(); got != reads {
		t.Errorf("%d terminal reads after the tab closed", got-reads)
	}
}

// streamGoroutines is the stacks of goroutines running a dashboard stream
// or a member's screen reads.
func streamGoroutines() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	var left []string
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "(*dashboardStream).run") || strings.Contains(g, "(*screenFeed).run") {
			left = append(left, g)
		}
	}
	return strings.Join(left, "\n\n")
}

// TestDashboardShowsOnlyWhatItsViewerMaySee: a service account that may
// not get members sees nothing and is answered 403; one that may not even
// send is refused at the door like every other request; a member sees its
// own team, and another team's member page is refused.
func TestDashboardShowsOnlyWhatItsViewerMaySee(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, gateway.Options{})
	_, leadToken := addMember(t, member("lead", ns).Team("core", fleetv1alpha1.RoleLead).Obj())
	addMember(t, member("coder", ns).Team("core", fleetv1alpha1.RoleMember).Obj())
	addMember(t, member("other", ns).Team("web", fleetv1alpha1.RoleMember).Obj())
	sender := env.ServiceAccountToken(t, ns, "sender", fleetv1alpha1.GatewayAudience)
	env.AllowDelegations(t, ns, "sender")
	stranger := env.ServiceAccountToken(t, ns, "stranger", fleetv1alpha1.GatewayAudience)

	for name, token := range map[string]string{"may not get members": sender, "may not send": stranger, "no token": ""} {
		t.Run(name, func(t *testing.T) {
			want := http.StatusForbidden
			if token == "" {
				want = http.StatusUnauthorized
			}
			for _, path := range []string{"/ui/api/fleet", "/ui/api/members/lead"} {
				testutil.Eventually(t, path, func() error {
					req, _ := http.NewRequest(http.MethodGet, h.url+path, nil)
					if token != "" {
						req.Header.Set("Authorization", "Bearer "+token)
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						return err
					}
					resp.Body.Close()
					return errIf(resp.StatusCode != want, "GET %s: %s, want %d", path, resp.Status, want)
				})
			}
		})
	}

	b := browsertest.Start(t)
	d := b.OpenDashboard(t, h.url, sender)
	if got := d.Refusal(); !strings.Contains(got, "may not get members") {
		t.Errorf("the page says %q, want why RBAC refused", got)
	}
	if got := d.RowCount(); got != 0 {
		t.Errorf("a refused viewer sees %d rows", got)
	}
	d.Screenshot("refused")

	m := b.OpenDashboard(t, h.url, leadToken)
	m.WaitLive()
	m.WaitRow("coder", "pending")
	m.WaitRowText("lead", "(you)")
	if got := m.VisibleRows(); !slices.Equal(got, []string{"coder", "lead"}) {
		t.Errorf("lead of core sees %v, want its team [coder lead]", got)
	}
	m.Exec(`location.hash = "#/m/other"`)
	if got := m.Refusal(); !strings.Contains(got, "not in your team") {
		t.Errorf("another team's page says %q", got)
	}
}
