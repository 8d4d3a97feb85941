package rotation

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// replicaPod makes a fleetd-like Pod with the gate, its gateway on port,
// and sets its status: an address, and Ready as ready says.
func replicaPod(t *testing.T, ns, name string, port int, ready bool) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: Gate}},
			Containers: []corev1.Container{{
				Name: "fleetd", Image: "fleetd",
				Ports: []corev1.ContainerPort{{Name: "gateway", ContainerPort: int32(port)}},
			}},
		},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{
		Phase:  corev1.PodRunning,
		PodIP:  "127.0.0.1",
		PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: status},
			{Type: Gate, Status: status},
		},
	}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func condition(t *testing.T, ns, name string, ct corev1.PodConditionType) corev1.PodCondition {
	t.Helper()
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == ct {
			return c
		}
	}
	return corev1.PodCondition{Type: ct, Status: corev1.ConditionUnknown}
}

// quiets is what the keeper is told of the replicas' Leases.
type quiets struct {
	mu sync.Mutex
	by map[string]time.Duration
}

func (q *quiets) set(name string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.by[name] = d
}

func (q *quiets) quiet(name string, _ time.Time) (time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d, ok := q.by[name]
	return d, ok
}

// TestKeeperTakesADeadReplicaOut runs one replica's Keeper against real
// Pods and a peer's real gateway port: it puts its own Pod in once its
// gateway serves, leaves a peer that answers or still renews alone, takes
// out one that does neither, and judges nobody while it is out itself.
func TestKeeperTakesADeadReplicaOut(t *testing.T) {
	env.Require(t)
	ns := env.Namespace(t)
	ctx := context.Background()

	var answering atomic.Bool
	answering.Store(true)
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !answering.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	defer peer.Close()
	_, portText, _ := net.SplitHostPort(peer.Listener.Addr().String())
	port, _ := strconv.Atoi(portText)
	replicaPod(t, ns, "fleetd-a", 1, false)
	replicaPod(t, ns, "fleetd-b", port, true)

	var serving atomic.Bool
	q := &quiets{by: map[string]time.Duration{"fleetd-b": 0}}
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k := &Keeper{
		Metrics: metrics,
		Client:  env.Client, Pods: env.Client, Namespace: ns, Self: "fleetd-a",
		Serving: serving.Load, Quiet: q.quiet, Policy: DefaultPolicy,
		Interval: 200 * time.Millisecond, Port: "gateway", HTTP: &http.Client{},
		Clock: clock.RealClock{}, Log: testr.New(t),
	}
	step := func(n int) {
		t.Helper()
		for range n {
			if err := k.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	in := func(name string) bool {
		return condition(t, ns, name, Gate).Status == corev1.ConditionTrue
	}

	step(1)
	if in("fleetd-a") {
		t.Fatal("a replica whose gateway does not serve yet put itself in the rotation")
	}
	serving.Store(true)
	step(1)
	if !in("fleetd-a") {
		t.Fatal("a replica whose gateway serves did not put itself in the rotation")
	}

	// b's gateway does not answer but its Lease renews: busy, or cut off
	// from a alone; a leaves it in.
	answering.Store(false)
	step(3)
	if !in("fleetd-b") || condition(t, ns, "fleetd-b", corev1.PodReady).Status != corev1.ConditionTrue {
		t.Fatal("a took out a replica whose Lease still renews")
	}

	// b's Lease goes quiet while its gateway answers: left in.
	answering.Store(true)
	q.set("fleetd-b", 3*time.Second)
	step(3)
	if !in("fleetd-b") {
		t.Fatal("a took out a replica whose gateway answers")
	}

	// Now neither (its port refuses): out after Misses probes, Ready
	// False too.
	peer.Close()
	step(DefaultPolicy.Misses - 1)
	if !in("fleetd-b") {
		t.Fatalf("a took b out after %d missed probes, before %d", DefaultPolicy.Misses-1, DefaultPolicy.Misses)
	}
	step(1)
	gate, ready := condition(t, ns, "fleetd-b", Gate), condition(t, ns, "fleetd-b", corev1.PodReady)
	if gate.Status != corev1.ConditionFalse || ready.Status != corev1.ConditionFalse || gate.Reason != "Unreachable" {
		t.Fatalf("a dead replica's Pod has gate %+v, Ready %+v; want both False, Unreachable", gate, ready)
	}
	t.Logf("taken out: %s", gate.Message)

	// A replica out of the rotation judges nobody: b comes back, and a is
	// the one taken out and not serving.
	replicaPod(t, ns, "fleetd-c", port, true)
	q.set("fleetd-c", time.Hour)
	serving.Store(false)
	self := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fleetd-a"}, self); err != nil {
		t.Fatal(err)
	}
	if written, err := k.write(ctx, self, corev1.ConditionFalse, "Unreachable", "a test", Gate); err != nil || !written {
		t.Fatalf("taking a out: written %v, %v", written, err)
	}
	step(3)
	if !in("fleetd-c") {
		t.Fatal("a replica out of the rotation took another out")
	}
	if in("fleetd-a") {
		t.Fatal("a replica not serving put itself back in")
	}
	serving.Store(true)
	step(1)
	if !in("fleetd-a") {
		t.Fatal("a replica serving again did not put itself back in")
	}
	for change, want := range map[string]float64{"in": 2, "out": 1} {
		if got := promtest.ToFloat64(metrics.changes.WithLabelValues(change)); got != want {
			t.Errorf("fleetd_gateway_rotation_changes_total{change=%q} = %v, want %v", change, got, want)
		}
	}
}
