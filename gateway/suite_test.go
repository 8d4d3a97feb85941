package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
)

// env is the package's API server, started by the first test that asks
// for it: table tests and fuzz targets never do.
var env *testenv.Env

func TestMain(m *testing.M) {
	if os.Getenv(loadEnvURL) != "" {
		if err := generateLoad(); err != nil {
			fmt.Fprintln(os.Stderr, "load generator:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testenv.Main(m, &env)
}

// staticToken is the static principal "primary"'s token in every harness.
const staticToken = "static-primary-token-0123456789"

// harness is one running gateway on a real listener, with a manager and a
// real cache, in one namespace.
type harness struct {
	mgr  ctrl.Manager
	ns   string
	url  string
	gw   *Gateway
	stop func()
}

// startGateway runs a gateway for namespace ns; opts.Addr, Namespace and
// StaticTokens are filled in.
func startGateway(t testing.TB, ns string, opts Options) *harness {
	t.Helper()
	env.Require(t)
	env.StaticTokens(t, ns, "fleetd-static-tokens", map[string]string{"primary": staticToken})
	mgr := env.GatewayManager(t, ns)
	opts.Addr = testenv.FreeAddr(t)
	opts.Namespace = ns
	opts.WatchNamespace = ns
	opts.StaticTokens = types.NamespacedName{Namespace: ns, Name: "fleetd-static-tokens"}
	gw, err := New(mgr, opts)
	if err != nil {
		t.Fatalf("creating the gateway: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	h := &harness{mgr: mgr, ns: ns, url: "http://" + opts.Addr, gw: gw}
	forget := caches.Add(ns, mgr.GetCache())
	stopped := false
	h.stop = func() {
		if stopped {
			return
		}
		stopped = true
		forget()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
	t.Cleanup(h.stop)
	testenv.WaitReady(t, h.url+"/readyz")
	return h
}

// caches are the caches of the running gateways, by namespace, so that
// objects a test creates can be waited for in them.
var caches = &testenv.Caches{}

// create creates objects and waits until every gateway running in their
// namespace has them in its cache, so that a call right after sees them.
func create(t testing.TB, objs ...client.Object) { t.Helper(); env.Create(t, caches, objs...) }

// httpClient sends token with every request.
func httpClient(token string) *http.Client { return mcpclient.BearerClient(token) }

// connect opens an MCP client session with token.
func (h *harness) connect(t testing.TB, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	var cs *mcp.ClientSession
	// A token minted a moment ago may not be in the gateway's cache yet.
	testutil.Eventually(t, "", func() error {
		var err error
		cs, err = h.tryConnect(token, opts)
		return err
	})
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func (h *harness) tryConnect(token string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	transport := &mcp.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: httpClient(token), DisableStandaloneSSE: true}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return mcp.NewClient(&mcp.Implementation{Name: "gateway-test", Version: "v0"}, opts).Connect(ctx, transport, nil)
}

// toolCall is the decoded answer of one tool call.
type toolCall[T any] struct {
	out T
	err *toolerr.Error
}

// callTool calls a tool and decodes its structured result.
func callTool[T any](t testing.TB, cs *mcp.ClientSession, name string, args any) toolCall[T] {
	t.Helper()
	return callToolCtx[T](t, context.Background(), cs, name, args)
}

func callToolCtx[T any](t testing.TB, ctx context.Context, cs *mcp.ClientSession, name string, args any) toolCall[T] {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return decodeResult[T](t, name, res)
}

func decodeResult[T any](t testing.TB, name string, res *mcp.CallToolResult) toolCall[T] {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatalf("%s: encoding structured content: %v", name, err)
	}
	var got toolCall[T]
	if res.IsError {
		var body errorBody
		if err := json.Unmarshal(raw, &body); err != nil || body.Error == nil {
			t.Fatalf("%s: error result without a structured error: %s (%v)", name, raw, res.Content)
		}
		got.err = body.Error
		return got
	}
	if err := json.Unmarshal(raw, &got.out); err != nil {
		t.Fatalf("%s: decoding %s: %v", name, raw, err)
	}
	return got
}

// wantCode fails unless a call failed with code.
func wantCode[T any](t testing.TB, got toolCall[T], code toolerr.Code) {
	t.Helper()
	if got.err == nil {
		t.Fatalf("want error %s, got success %+v", code, got.out)
	}
	if got.err.Code != code {
		t.Fatalf("want error %s, got %s: %s", code, got.err.Code, got.err.Message)
	}
}

// wantOK fails unless a call succeeded.
func wantOK[T any](t testing.TB, got toolCall[T]) T {
	t.Helper()
	if got.err != nil {
		t.Fatalf("want success, got %s: %s", got.err.Code, got.err.Message)
	}
	return got.out
}

// async runs a tool call in the background.
func async[T any](t testing.TB, ctx context.Context, cs *mcp.ClientSession, name string, args any) <-chan toolCall[T] {
	ch := make(chan toolCall[T], 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			ch <- toolCall[T]{err: &toolerr.Error{Code: "transport", Message: err.Error()}}
			return
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var got toolCall[T]
		if res.IsError {
			var body errorBody
			_ = json.Unmarshal(raw, &body)
			got.err = body.Error
			if got.err == nil {
				got.err = &toolerr.Error{Code: "unstructured", Message: fmt.Sprint(res.Content)}
			}
		} else if err := json.Unmarshal(raw, &got.out); err != nil {
			got.err = &toolerr.Error{Code: "undecodable", Message: err.Error()}
		}
		ch <- got
	}()
	return ch
}

// receive waits for a background call.
func receive[T any](t testing.TB, ch <-chan toolCall[T]) toolCall[T] {
	t.Helper()
	select {
	case got := <-ch:
		return got
	case <-time.After(60 * time.Second):
		t.Fatal("the call did not return")
	}
	panic("unreachable")
}

// addMember creates a Member and records its token as its controller would:
// a token Secret for the pane, the token's hash in the Member's status for
// the gateway. It returns the member and its token.
func addMember(t testing.TB, m *fleetv1alpha1.Member) (*fleetv1alpha1.Member, string) {
	t.Helper()
	create(t, m)
	return m, env.MemberToken(t, caches, m)
}

// waitDelegation waits for the one Delegation to member to show up and
// returns it; with several, the newest.
func waitDelegation(t testing.TB, ns, member string, match func(*fleetv1alpha1.Delegation) bool) *fleetv1alpha1.Delegation {
	t.Helper()
	var found *fleetv1alpha1.Delegation
	testutil.Eventually(t, "", func() error {
		var list fleetv1alpha1.DelegationList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.LabelMember: member}); err != nil {
			return err
		}
		for i := range list.Items {
			d := &list.Items[i]
			if match == nil || match(d) {
				if found == nil || d.CreationTimestamp.After(found.CreationTimestamp.Time) {
					found = d
				}
			}
		}
		if found == nil {
			return fmt.Errorf("no delegation to %s yet", member)
		}
		return nil
	})
	return found
}

// Transitions for settle, as the controller makes them.
var (
	typed = func(d *fleetv1alpha1.Delegation, now time.Time) {
		delegation.BeginDelivery(d, now, delegation.Target{PaneID: "w1:p1", TerminalID: "term-1"})
	}
	pickedUp = func(d *fleetv1alpha1.Delegation, now time.Time) { delegation.Pickup(d, now) }
	timedOut = func(d *fleetv1alpha1.Delegation, now time.Time) { delegation.TimeOut(d, now) }
)

// replied is the worker's reply, as the gateway records it.
func replied(text string) func(d *fleetv1alpha1.Delegation, now time.Time) {
	return func(d *fleetv1alpha1.Delegation, now time.Time) {
		if err := delegation.Reply(d, now, text); err != nil {
			panic(err)
		}
	}
}

// deliver plays the controller delivering a Delegation: typed, then picked
// up. A worker's call right after may reach the gateway before its cache
// shows the delivery, which the gateway copes with.
func deliver(t testing.TB, ns, name string) {
	t.Helper()
	env.Settle(t, ns, name, typed, pickedUp)
}

// member is shorthand for a test member in ns.
func member(name, ns string) *testutil.MemberWrapper {
	return testutil.MakeMember(name, ns).Command("true")
}

// exportAll lets go-cmp look into the outputs' embedded failure.
var exportAll = cmp.Exporter(func(reflect.Type) bool { return true })

// errIf returns an error when cond holds.
func errIf(cond bool, format string, args ...any) error {
	if cond {
		return fmt.Errorf(format, args...)
	}
	return nil
}

// diffErr returns the difference of want and got as an error.
func diffErr(want, got any, opts ...cmp.Option) error {
	if diff := cmp.Diff(want, got, append(opts, exportAll)...); diff != "" {
		return fmt.Errorf("(-want +got):\n%s", diff)
	}
	return nil
}

// cmpSorted compares string slices as sets.
var cmpSorted = cmpopts.SortSlices(func(a, b string) bool { return a < b })
