package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/shard"
)

// shardCount is config/default's (--shards' default).
const shardCount = shard.DefaultCount

// shardHolders maps each shard to the replica its Lease names ("" for
// none).
func (c *cluster) shardHolders(ctx context.Context) (map[int]string, error) {
	leases, err := c.shardLeases(ctx)
	if err != nil {
		return nil, err
	}
	return shard.Holders(leases), nil
}

// shardLeases are the shards' Leases by shard.
func (c *cluster) shardLeases(ctx context.Context) (map[int]*coordinationv1.Lease, error) {
	var leases coordinationv1.LeaseList
	if err := c.client.List(ctx, &leases, client.InNamespace(fleetdNamespace), client.MatchingLabels{fleetv1alpha1.LabelLease: shard.LeaseShard}); err != nil {
		return nil, err
	}
	return shard.ByShard(leases.Items, shardCount), nil
}

// replicaOf is the running fleetd pod a shard holder is (a replica is
// named after its pod).
func replicaOf(holder string, pods []*corev1.Pod) *corev1.Pod {
	for _, p := range pods {
		if holder == p.Name {
			return p
		}
	}
	return nil
}

// sharedOut waits until every shard is held by a running replica, each
// replica holding some, and returns the holders.
func (c *cluster) sharedOut(t *testing.T, pods []*corev1.Pod) map[int]string {
	t.Helper()
	var holders map[int]string
	testutil.Eventually(t, "every shard held, by every replica", func() (bool, string) {
		var err error
		if holders, err = c.shardHolders(context.Background()); err != nil {
			return false, err.Error()
		}
		per := map[string]int{}
		for i := range shardCount {
			h := holders[i]
			if h == "" || replicaOf(h, pods) == nil {
				return false, fmt.Sprintf("shard %d held by %q", i, h)
			}
			per[replicaOf(h, pods).Name]++
		}
		return len(per) == len(pods), fmt.Sprintf("shards per replica: %v", per)
	}, testutil.Within(time.Minute))
	return holders
}

// replicas are fleetd's running pods; a test of more than one skips
// with fewer.
func (c *cluster) replicas(t *testing.T) []*corev1.Pod {
	t.Helper()
	pods, err := c.pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) < 2 {
		t.Skipf("%d fleetd replica", len(pods))
	}
	return pods
}

// TestShardsSharedOut: config/default's replicas share the shards out,
// and a Member, its Pod and its Delegations carry its shard.
func TestShardsSharedOut(t *testing.T) {
	c := clusterMode(t)
	dumpOnFailure(t)
	pods := c.replicas(t)
	c.sharedOut(t, pods)
	member(t, "e2e-shard-label")
	want := shard.Value(shard.Of(ns, "e2e-shard-label", shardCount))
	testutil.Eventually(t, "the member labelled with its shard", func() (bool, string) {
		m, err := getMember("e2e-shard-label")
		if err != nil {
			return false, err.Error()
		}
		return m.Labels[fleetv1alpha1.LabelShard] == want, fmt.Sprintf("labels %v", m.Labels)
	})
	if pod := podNow(t, "e2e-shard-label"); pod.Labels[fleetv1alpha1.LabelShard] != want {
		t.Errorf("the member's pod is labelled shard %q, want %q", pod.Labels[fleetv1alpha1.LabelShard], want)
	}
	r := call(t, session(t, w.token), "bridge_send", map[string]any{"sessionId": "e2e-shard-label", "content": "reply: sharded"})
	wantOutcome(t, r, "reply")
	if d := delegation(t, r.Str("dispatchId")); d.Labels[fleetv1alpha1.LabelShard] != want {
		t.Errorf("the delegation is labelled shard %q, want %q", d.Labels[fleetv1alpha1.LabelShard], want)
	}
	out, err := w.kubectl("get", "members", "-n", ns, "e2e-shard-label", "-o", "wide")
	if err != nil || !strings.Contains(out, "SHARD") || !strings.Contains(out, " "+want+" ") {
		t.Errorf("kubectl get members -o wide shows no shard %s: %v\n%s", want, err, out)
	}
}

// TestReplicaCrashMidBurst crashes one fleetd replica (its process ends
// at once, with no handover) while messages are queued for members of
// both replicas' shards: the crashed replica's shards are taken over, every
// message ends in a phase the contract allows, each is typed at most once,
// and the gateway behind the Service keeps answering.
func TestReplicaCrashMidBurst(t *testing.T) {
	c := localCluster(t)
	dumpOnFailure(t)
	ctx := context.Background()
	pods := c.replicas(t)
	holders := c.sharedOut(t, pods)
	victim := pods[0]

	// Two members in the victim's shards, two in the others'.
	var names []string
	onVictim, elsewhere := 0, 0
	for i := 0; onVictim < 2 || elsewhere < 2; i++ {
		name := fmt.Sprintf("e2e-crash-%d", i)
		switch mine := replicaOf(holders[shard.Of(ns, name, shardCount)], pods) == victim; {
		case mine && onVictim < 2:
			onVictim++
		case !mine && elsewhere < 2:
			elsewhere++
		default:
			continue
		}
		names = append(names, name)
	}
	logs := map[string]string{}
	for _, name := range names {
		logs[name] = member(t, name)
	}

	// A client of the Service (not of one pod).
	stopProbe := c.serviceProbe(t)

	s, err := mcpclient.Connect(ctx, w.gatewayURL, w.token)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	sent := burst(t, s, names, n)
	s.Close()
	testutil.Eventually(t, "some deliveries to every member", func() (bool, string) {
		var counts []int
		for _, name := range names {
			counts = append(counts, len(received(t, logs[name])))
		}
		for _, got := range counts {
			if got < 2 {
				return false, fmt.Sprintf("received %v", counts)
			}
		}
		return true, ""
	})

	var victims []int
	for i, h := range holders {
		if h == victim.Name {
			victims = append(victims, i)
		}
	}
	before := containerStatus(victim, fleetdContainer).RestartCount
	// Lease times have microseconds; the API server's clock is this
	// machine's.
	crashed := time.Now()
	// SIGQUIT ends the Go process at once: no lease is handed over. Its
	// container starts again, as the same replica, and takes its shards
	// back, unless the other replica has taken them first.
	_, _ = c.exec(victim.Name, fleetdContainer, "kill -s QUIT 1")
	testutil.Eventually(t, "the crashed replica's shards run again", func() (bool, string) {
		leases, err := c.shardLeases(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, i := range victims {
			l := leases[i]
			if l == nil || l.Spec.AcquireTime == nil || l.Spec.AcquireTime.Time.Before(crashed) || ptr.Deref(l.Spec.HolderIdentity, "") == "" {
				return false, fmt.Sprintf("shard %d not taken since the crash", i)
			}
		}
		return true, ""
	}, testutil.Within(time.Minute))
	takeover := time.Since(crashed)
	leases, err := c.shardLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	for _, i := range victims {
		by[ptr.Deref(leases[i].Spec.HolderIdentity, "")]++
	}
	t.Logf("the crashed replica's %d shards now run on %v", len(victims), by)

	for _, name := range names {
		settled(t, sent[name])
		counts := map[string]int{}
		for _, p := range received(t, logs[name]) {
			counts[p]++
		}
		typed := 0
		for i := range n {
			c := counts[fmt.Sprintf("silent: %s %02d", name, i)]
			if c > 1 {
				t.Errorf("%s's message %02d typed %d times", name, i, c)
			}
			typed += c
		}
		// The one being typed at the crash may end unconfirmed.
		if typed < n-1 {
			t.Errorf("%s: %d of %d typed", name, typed, n)
		}
	}
	testutil.Eventually(t, "the crashed replica's fleetd container back and ready", func() (bool, string) {
		p := &corev1.Pod{}
		if err := w.client.Get(ctx, client.ObjectKeyFromObject(victim), p); err != nil {
			return false, err.Error()
		}
		st := containerStatus(p, fleetdContainer)
		return st != nil && st.RestartCount > before && st.Ready, fmt.Sprintf("%+v", st)
	}, testutil.Within(2*time.Minute))
	c.sharedOut(t, pods)
	probes, failures := stopProbe()
	t.Logf("shards taken over %.1fs after the crash (lease duration %s); the Service's gateway failed %d of %d probes",
		takeover.Seconds(), shard.DefaultLeaseDuration, failures, probes)
}

// serviceProbe asks the gateway behind the Service whether it is ready,
// over a fresh connection every 100 ms (each to whichever replica the
// Service picks), until stop; it returns the probes made and failed.
func (c *cluster) serviceProbe(t *testing.T) (stop func() (probes, failures int64)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := c.local.ServiceAddr(ctx, fleetdNamespace, "fleetd-gateway", "gateway")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := c.local.Forward(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	var n, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for ctx.Err() == nil {
			n.Add(1)
			resp, err := hc.Get("http://" + addr + "/readyz")
			if err != nil || resp.StatusCode != http.StatusOK {
				failed.Add(1)
			}
			if err == nil {
				resp.Body.Close()
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	t.Cleanup(cancel)
	return func() (int64, int64) {
		cancel()
		wg.Wait()
		return n.Load(), failed.Load()
	}
}

// TestRolloutHandsShardsOver restarts every fleetd replica, one at a time
// as the Deployment rolls out, while messages are queued: each replica
// that stops hands its shards over at once, every message is typed once,
// and the gateway behind the Service answers throughout.
func TestRolloutHandsShardsOver(t *testing.T) {
	c := localCluster(t)
	dumpOnFailure(t)
	ctx := context.Background()
	pods := c.replicas(t)
	c.sharedOut(t, pods)
	names := []string{"e2e-rollout-a", "e2e-rollout-b", "e2e-rollout-c"}
	logs := map[string]string{}
	for _, name := range names {
		logs[name] = member(t, name)
	}
	stop := c.serviceProbe(t)
	s := session(t, w.token)
	const n = 8
	sent := burst(t, s, names, n)
	started := time.Now()
	// The suite's port-forward goes to one pod; it follows to another.
	t.Cleanup(func() {
		if err := waitServing(w.gatewayURL, 2*time.Minute, nil); err != nil {
			t.Error(err)
		}
	})
	if out, err := w.kubectl("-n", fleetdNamespace, "rollout", "restart", "deployment/fleetd"); err != nil {
		t.Fatalf("kubectl rollout restart: %v\n%s", err, out)
	}
	if out, err := w.kubectl("-n", fleetdNamespace, "rollout", "status", "deployment/fleetd", "--timeout=3m"); err != nil {
		t.Fatalf("kubectl rollout status: %v\n%s", err, out)
	}
	rolled := time.Since(started)
	after, err := c.pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.sharedOut(t, after)
	for _, name := range names {
		settled(t, sent[name])
		got := received(t, logs[name])
		var want []string
		for i := range n {
			want = append(want, fmt.Sprintf("silent: %s %02d", name, i))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s received %q, want each of its messages once, in order: a clean handover loses none", name, got)
		}
	}
	probes, failures := stop()
	t.Logf("rollout of %d replicas took %.1fs; the Service's gateway failed %d of %d probes", len(pods), rolled.Seconds(), failures, probes)
	if failures > 0 {
		t.Errorf("the gateway behind the Service failed %d of %d probes during a rollout, with a replica always serving", failures, probes)
	}
}

// burst sends each of names n detached messages ("silent: <name> <i>")
// and returns their dispatch ids by member.
func burst(t *testing.T, s *mcp.ClientSession, names []string, n int) map[string][]string {
	t.Helper()
	sent := map[string][]string{}
	for _, name := range names {
		for i := range n {
			r := call(t, s, "bridge_send", map[string]any{"sessionId": name, "content": fmt.Sprintf("silent: %s %02d", name, i), "wait": false})
			wantOutcome(t, r, "dispatched")
			sent[name] = append(sent[name], r.Str("dispatchId"))
		}
	}
	return sent
}

// settled waits until each of the Delegations ids has settled in a phase
// a message that was never answered may end in: TurnDone, or Failed (a
// delivery a crash left unconfirmed).
func settled(t *testing.T, ids []string) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%d messages settled", len(ids)), func() (bool, string) {
		var open []string
		for _, id := range ids {
			d := delegation(t, id)
			if d.Status.Phase != fleetv1alpha1.DelegationTurnDone && d.Status.Phase != fleetv1alpha1.DelegationFailed {
				open = append(open, fmt.Sprintf("%s %s", d.Spec.Content, d.Status.Phase))
			}
		}
		return len(open) == 0, fmt.Sprintf("unsettled: %v", open)
	}, testutil.Within(2*time.Minute))
}
