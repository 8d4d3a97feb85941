// Package browser tests fleetd's dashboard in a real browser (headless
// Chromium, driven by browsertest) against a real gateway on a real API
// server. The gateway runs in the test process, through its exported API
// (gateway.New on a manager of the test's own), so a test plays the
// controllers itself: it writes Members' status and moves Delegations
// through their phases as they would.
package browser

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
)

// env is the package's API server, started by the first test that asks
// for it.
var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// staticToken is the static principal "primary"'s token in every harness.
const staticToken = "static-primary-token-0123456789"

// harness is one running gateway on a real listener, with a manager and a
// real cache, in one namespace.
type harness struct {
	mgr ctrl.Manager
	url string
	gw  *gateway.Gateway
}

// startGateway runs a gateway for namespace ns, as fleetd wires it;
// opts.Addr, Namespace and StaticTokens are filled in.
func startGateway(t testing.TB, ns string, opts gateway.Options) *harness {
	t.Helper()
	env.Require(t)
	env.StaticTokens(t, ns, "fleetd-static-tokens", map[string]string{"primary": staticToken})
	mgr := env.GatewayManager(t, ns)
	opts.Addr = testenv.FreeAddr(t)
	opts.Namespace = ns
	opts.WatchNamespace = ns
	opts.StaticTokens = types.NamespacedName{Namespace: ns, Name: "fleetd-static-tokens"}
	gw, err := gateway.New(mgr, opts)
	if err != nil {
		t.Fatalf("creating the gateway: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	h := &harness{mgr: mgr, url: "http://" + opts.Addr, gw: gw}
	forget := caches.Add(ns, mgr.GetCache())
	t.Cleanup(func() {
		forget()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	testenv.WaitReady(t, h.url+"/readyz")
	return h
}

// caches are the caches of the running gateways, by namespace, so that
// objects a test creates can be waited for in them.
var caches = &testenv.Caches{}

// addMember creates a Member and records its token as its controller would,
// and returns the member and its token.
func addMember(t testing.TB, m *fleetv1alpha1.Member) (*fleetv1alpha1.Member, string) {
	t.Helper()
	env.Create(t, caches, m)
	return m, env.MemberToken(t, caches, m)
}

// Transitions for settle, as the controller makes them.
var (
	typed = func(d *fleetv1alpha1.Delegation, now time.Time) {
		delegation.BeginDelivery(d, now, delegation.Target{PaneID: "w1:p1", TerminalID: "term-1"})
	}
	pickedUp = func(d *fleetv1alpha1.Delegation, now time.Time) { delegation.Pickup(d, now) }
)

// replied is the worker's reply, as the gateway records it.
func replied(text string) func(d *fleetv1alpha1.Delegation, now time.Time) {
	return func(d *fleetv1alpha1.Delegation, now time.Time) {
		if err := delegation.Reply(d, now, text); err != nil {
			panic(err)
		}
	}
}

// member is shorthand for a test member in ns.
func member(name, ns string) *testutil.MemberWrapper {
	return testutil.MakeMember(name, ns).Command("true")
}

// errIf returns an error when cond holds.
func errIf(cond bool, format string, args ...any) error {
	if cond {
		return fmt.Errorf(format, args...)
	}
	return nil
}
