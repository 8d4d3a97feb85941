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
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway"
	"github.com/fleetd/fleetd/internal/fleetcache"
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
	ensureStaticTokens(t, ns)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: func() cache.Options {
			o := fleetcache.Options()
			o.DefaultNamespaces = map[string]cache.Config{ns: {}}
			return o
		}(),
	})
	if err != nil {
		t.Fatalf("creating a manager: %v", err)
	}
	opts.Addr = freeAddr(t)
	opts.Namespace = ns
	opts.StaticTokens = types.NamespacedName{Namespace: ns, Name: "fleetd-static-tokens"}
	gw, err := gateway.New(mgr, opts)
	if err != nil {
		t.Fatalf("creating the gateway: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	h := &harness{mgr: mgr, url: "http://" + opts.Addr, gw: gw}
	t.Cleanup(func() {
		running.remove(ns, h)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	running.add(ns, h)
	testutil.Eventually(t, "", func() error {
		resp, err := http.Get(h.url + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})
	return h
}

// running lists the gateways of each test namespace, so that objects a test
// creates can be waited for in their caches.
var running = &harnesses{byNS: map[string][]*harness{}}

type harnesses struct {
	mu   sync.Mutex
	byNS map[string][]*harness
}

func (r *harnesses) add(ns string, h *harness) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byNS[ns] = append(r.byNS[ns], h)
}

func (r *harnesses) remove(ns string, h *harness) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, o := range r.byNS[ns] {
		if o == h {
			r.byNS[ns] = append(r.byNS[ns][:i:i], r.byNS[ns][i+1:]...)
			return
		}
	}
}

func (r *harnesses) in(ns string) []*harness {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*harness(nil), r.byNS[ns]...)
}

// create creates objects and waits until every gateway running in their
// namespace has them in its cache, so that a page or a call right after
// sees them.
func create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	for _, o := range objs {
		for _, h := range running.in(o.GetNamespace()) {
			testutil.Eventually(t, "", func() error {
				return h.mgr.GetCache().Get(context.Background(), client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object))
			})
		}
	}
}

// freeAddr finds a free loopback port.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// ensureStaticTokens creates the static-token Secret of namespace ns.
func ensureStaticTokens(t testing.TB, ns string) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "fleetd-static-tokens", Namespace: ns, Labels: map[string]string{fleetv1alpha1.LabelStaticToken: "true"}},
		StringData: map[string]string{"primary": staticToken + "\n"},
	}
	if err := env.Client.Create(context.Background(), s); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating static tokens: %v", err)
	}
}

// serviceAccountToken creates a ServiceAccount and mints a token for it
// with the TokenRequest API.
func serviceAccountToken(t testing.TB, ns, name string, audiences ...string) string {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service account %s: %v", name, err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("minting a token for %s: %v", name, err)
	}
	return tr.Status.Token
}

// allowDelegations binds a service account to a Role that may create
// Delegations in ns.
func allowDelegations(t testing.TB, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "delegator-" + sa, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{fleetv1alpha1.GroupVersion.Group}, Resources: []string{"delegations"}, Verbs: []string{"create"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "delegator-" + sa, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}
	if err := env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
}

// addMember creates a Member and records its token as its controller would:
// a token Secret for the pane, the token's hash in the Member's status for
// the gateway. It returns the member and its token.
func addMember(t testing.TB, m *fleetv1alpha1.Member) (*fleetv1alpha1.Member, string) {
	t.Helper()
	create(t, m)
	token := fmt.Sprintf("member-%s-%s-token", m.Name, m.UID)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: m.Name + "-fleetd-token", Namespace: m.Namespace,
			Labels: map[string]string{fleetv1alpha1.LabelMember: m.Name, fleetv1alpha1.LabelMemberUID: string(m.UID)},
		},
		Data: map[string][]byte{fleetv1alpha1.TokenSecretKey: []byte(token)},
	})
	setMemberStatus(t, m, func(st *fleetv1alpha1.MemberStatus) {
		st.TokenHash, st.TokenSecretName = fleetv1alpha1.TokenHash(token), m.Name+"-fleetd-token"
	})
	return m, token
}

// setMemberStatus writes a Member's status as its controller would.
func setMemberStatus(t testing.TB, m *fleetv1alpha1.Member, mutate func(*fleetv1alpha1.MemberStatus)) {
	t.Helper()
	testutil.Eventually(t, "", func() error {
		var cur fleetv1alpha1.Member
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(m), &cur); err != nil {
			return err
		}
		mutate(&cur.Status)
		return env.Client.Status().Update(context.Background(), &cur)
	})
}

// getDelegation reads a Delegation from the API server.
func getDelegation(t testing.TB, ns, name string) *fleetv1alpha1.Delegation {
	t.Helper()
	var d fleetv1alpha1.Delegation
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatalf("reading delegation %s: %v", name, err)
	}
	return &d
}

// settle plays the Delegation controller: it applies transitions to the
// Delegation and writes it.
func settle(t testing.TB, ns, name string, transitions ...func(d *fleetv1alpha1.Delegation, now time.Time)) {
	t.Helper()
	testutil.Eventually(t, "", func() error {
		var d fleetv1alpha1.Delegation
		if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &d); err != nil {
			return err
		}
		for _, f := range transitions {
			f(&d, time.Now())
		}
		return env.Client.Status().Update(context.Background(), &d)
	})
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
