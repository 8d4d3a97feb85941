package testenv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/fleetcache"
	"github.com/fleetd/fleetd/internal/testutil"
)

// Caches are the caches of the managers a test runs, by namespace, so
// that what a test creates can be waited for in each of them.
type Caches struct {
	mu   sync.Mutex
	byNS map[string][]client.Reader
}

// Add records the cache of a manager that serves namespace ns; remove
// forgets it.
func (c *Caches) Add(ns string, r client.Reader) (remove func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byNS == nil {
		c.byNS = map[string][]client.Reader{}
	}
	c.byNS[ns] = append(c.byNS[ns], r)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, o := range c.byNS[ns] {
			if o == r {
				c.byNS[ns] = append(c.byNS[ns][:i:i], c.byNS[ns][i+1:]...)
				return
			}
		}
	}
}

// Seen waits until every cache of the objects' namespace has them.
func (c *Caches) Seen(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		c.mu.Lock()
		readers := append([]client.Reader(nil), c.byNS[o.GetNamespace()]...)
		c.mu.Unlock()
		for _, r := range readers {
			testutil.Eventually(t, "", func() error {
				return r.Get(context.Background(), client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object))
			})
		}
	}
}

// Create creates objs and waits until every cache in c has them, so that a
// call right after sees them.
func (e *Env) Create(t testing.TB, c *Caches, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := e.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	c.Seen(t, objs...)
}

// StaticTokens creates the static-token Secret name in ns, with tokens by
// principal, unless it exists.
func (e *Env) StaticTokens(t testing.TB, ns, name string, tokens map[string]string) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{fleetv1alpha1.LabelStaticToken: "true"}},
		StringData: map[string]string{},
	}
	for p, token := range tokens {
		s.StringData[p] = token + "\n"
	}
	if err := e.Client.Create(context.Background(), s); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating static tokens: %v", err)
	}
}

// MemberToken records a token for the existing Member m as its controller
// would (a token Secret for the pane, the token's hash in the Member's
// status for the gateway), waits until the caches in c have the Secret,
// and returns the token.
func (e *Env) MemberToken(t testing.TB, c *Caches, m *fleetv1alpha1.Member) string {
	t.Helper()
	token := fmt.Sprintf("member-%s-%s-token", m.Name, m.UID)
	e.Create(t, c, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: m.Name + "-fleetd-token", Namespace: m.Namespace,
			Labels: map[string]string{fleetv1alpha1.LabelMember: m.Name, fleetv1alpha1.LabelMemberUID: string(m.UID)},
		},
		Data: map[string][]byte{fleetv1alpha1.TokenSecretKey: []byte(token)},
	})
	e.SetMemberStatus(t, m, func(st *fleetv1alpha1.MemberStatus) {
		st.TokenHash, st.TokenSecretName = fleetv1alpha1.TokenHash(token), m.Name+"-fleetd-token"
	})
	return token
}

// SetMemberStatus writes a Member's status as its controller would.
func (e *Env) SetMemberStatus(t testing.TB, m *fleetv1alpha1.Member, mutate func(*fleetv1alpha1.MemberStatus)) {
	t.Helper()
	testutil.Eventually(t, "", func() error {
		var cur fleetv1alpha1.Member
		if err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(m), &cur); err != nil {
			return err
		}
		mutate(&cur.Status)
		return e.Client.Status().Update(context.Background(), &cur)
	})
}

// SetProfileStatus writes a Profile's status as its controller would.
func (e *Env) SetProfileStatus(t testing.TB, p *fleetv1alpha1.Profile, mutate func(*fleetv1alpha1.ProfileStatus)) {
	t.Helper()
	testutil.Eventually(t, "", func() error {
		var cur fleetv1alpha1.Profile
		if err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(p), &cur); err != nil {
			return err
		}
		mutate(&cur.Status)
		return e.Client.Status().Update(context.Background(), &cur)
	})
}

// FreeAddr finds a free loopback port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// WaitReady waits until GET url answers 200.
func WaitReady(t testing.TB, url string) {
	t.Helper()
	testutil.Eventually(t, "", func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// Manager is a manager on the API server, with fleetd's cache options, that
// watches namespace ns alone and serves no metrics or probes.
func (e *Env) Manager(t testing.TB, ns string) ctrl.Manager {
	t.Helper()
	return e.manager(t, ns, fleetcache.Options())
}

// GatewayManager is Manager with the cache of a manager whose Delegations
// only the gateway reads: closed Delegations left out.
func (e *Env) GatewayManager(t testing.TB, ns string) ctrl.Manager {
	t.Helper()
	return e.manager(t, ns, fleetcache.GatewayOptions())
}

// ShardManager is Manager with the cache of the controllers of the owned
// shards: Delegations, and members' Pods and Secrets, of those shards only.
func (e *Env) ShardManager(t testing.TB, ns string, owned []int) ctrl.Manager {
	t.Helper()
	return e.manager(t, ns, fleetcache.ShardOptions(owned))
}

func (e *Env) manager(t testing.TB, ns string, o cache.Options) ctrl.Manager {
	t.Helper()
	e.Require(t)
	o.DefaultNamespaces = map[string]cache.Config{ns: {}}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  o,
	})
	if err != nil {
		t.Fatalf("creating a manager: %v", err)
	}
	return mgr
}
