package cluster

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/rotation"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/shard"
	"github.com/fleetd/fleetd/test/framework/localcluster"
)

// chaosConfig is the size of a chaos soak.
type chaosConfig struct {
	// replicas of fleetd.
	replicas int
	// members are scripted members in Pods of their own.
	members int
	// delegations are sent in all, by senders service accounts, each
	// holding inFlight calls at once.
	delegations, senders, inFlight int
	// spread spreads the sends evenly over at least this long (0: as fast
	// as the senders go), so that a short run still meets the faults.
	spread time.Duration
	// replicaEvery and podEvery are how often a fleetd replica and a
	// member's Pod are killed.
	replicaEvery, podEvery time.Duration
	// nodeKillAt is when in the run a node is killed once (0: never).
	nodeKillAt time.Duration
	// baseline runs the same sends without faults first, for the ratios.
	baseline bool
}

// The chaos soak's sizes: the short form make test-cluster runs, and the
// full one of make bench-cluster.
var (
	chaosShort = chaosConfig{
		replicas: 3, members: 12, delegations: 200, senders: 10, inFlight: 2,
		spread: 100 * time.Second, replicaEvery: 20 * time.Second, podEvery: 10 * time.Second,
		nodeKillAt: 30 * time.Second,
	}
	chaosFull = chaosConfig{
		replicas: 3, members: 100, delegations: 2000, senders: 10, inFlight: 10,
		replicaEvery: 20 * time.Second, podEvery: 10 * time.Second,
		nodeKillAt: 45 * time.Second, baseline: true,
	}
)

const (
	fleetdNamespace = "fleetd-system"
	fleetdSelector  = "app.kubernetes.io/name=fleetd"
	// chaosHold is the timeoutMs of a first send: far past the run, so
	// that a slow machine shows as a slow run, not as TimedOut. A
	// re-attach waits chaosRejoin at a time.
	chaosHold   = time.Hour
	chaosRejoin = time.Minute
	// chaosGuard ends a held call from the client's side when its
	// connection went silent (a node's power lost takes no RST with it).
	chaosGuard = 2 * time.Minute
	// chaosGiveUp bounds how long one message is tried for.
	chaosGiveUp = 15 * time.Minute
)

// TestChaosSoak is the short form of BenchmarkChaosSoak (see there): 3
// fleetd replicas, 12 members, 200 Delegations from 10 senders spread
// over 100 s, a replica killed every 20 s, a member's Pod every 10 s and a
// node once. It checks correctness only; the figures are logged.
func TestChaosSoak(t *testing.T) {
	requireCluster(t)
	s := newChaosSoak(t, chaosShort)
	s.round(t, "chaos", nil)
}

// BenchmarkChaosSoak deploys fleetd with config/default on the 3-node test
// cluster, scaled to 3 replicas, starts 100 scripted members in Pods over
// the nodes, and has 10 senders (service accounts of their own, through
// the gateway's Service) send 2,000 held bridge_send calls ("reply: <id>"),
// 10 at once each, re-attaching with bridge_send {dispatchId} (or the
// message's idempotencyKey, when no dispatchId came back) after an
// interrupted call, a timeout or a dropped connection. It does so twice:
// once without faults (the baseline), and once while a loop kills a
// fleetd replica every 20 s (alternately SIGQUIT to its process and a
// forced delete of its Pod), a member's Pod every 10 s, and once a whole
// node, booted again afterwards. It reports:
//
//   - how long the shards of a dead replica take to be held by live ones
//     (from the kill until no shard Lease names the dead one; p50, max);
//   - what a client of the gateway's Service sees: GET /readyz on a fresh
//     connection every 100 ms, failed probes and the longest run of
//     failures;
//   - throughput and latency with faults against the baseline.
//
// It fails if a Delegation ends in a phase the contract does not allow
// for these faults, a reply does not reach its sender, a prompt is typed
// twice (the agents' own received logs, all Pods of a member together),
// or a member's prompts are typed out of their queue's order.
func BenchmarkChaosSoak(b *testing.B) {
	requireCluster(b)
	s := newChaosSoak(b, chaosFull)
	round := 0
	for b.Loop() {
		round++
		s.round(b, fmt.Sprintf("chaos-%d", round), b.ReportMetric)
	}
}

// chaosSoak is the cluster a chaos soak runs on: fleetd deployed and
// scaled.
type chaosSoak struct {
	cfg chaosConfig
	cl  *localcluster.Cluster
	r   *scaleRun
	// gateway is the gateway Service's ClusterIP and port.
	gateway string
}

func newChaosSoak(tb testing.TB, cfg chaosConfig) *chaosSoak {
	tb.Helper()
	cl := up(tb)
	loadImages(tb, "fleetd")
	deployFleetd(tb, cl)
	kubectl(tb, cl, "-n", fleetdNamespace, "scale", "deployment/fleetd", fmt.Sprintf("--replicas=%d", cfg.replicas))
	if out, err := kubectlErr(cl, "-n", fleetdNamespace, "rollout", "status", "deployment/fleetd", "--timeout=180s"); err != nil {
		tb.Fatalf("fleetd did not scale to %d: %v\n%s\n%s", cfg.replicas, err, out, diagnose(cl))
	}
	s := &chaosSoak{cfg: cfg, cl: cl, r: newScaleRun(tb, cl)}
	if err := s.waitShared(cfg.replicas, 2*time.Minute); err != nil {
		tb.Fatalf("%v\n%s", err, diagnose(cl))
	}
	svc, err := cl.ServiceAddr(context.Background(), fleetdNamespace, "fleetd-gateway", "gateway")
	if err != nil {
		tb.Fatal(err)
	}
	s.gateway = svc
	return s
}

// round runs one soak in namespace ns: members, senders, the baseline when
// configured, the faulted run, the checks. report takes the figures (nil:
// they are only logged).
func (s *chaosSoak) round(tb testing.TB, ns string, report func(float64, string)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := s.cfg
	// The figures go to report and into the log: a failed benchmark
	// prints no metrics.
	var figures []string
	metric := report
	report = func(v float64, unit string) {
		if metric != nil {
			metric(v, unit)
		}
		figures = append(figures, fmt.Sprintf("%.4g %s", v, unit))
	}
	v := s.r.namespaces(tb, ctx, ns)
	members := memberNames(cfg.members)
	started := s.r.startMembers(tb, v, ns, members)
	tb.Logf("%d members Ready in %.1fs", len(members), started.ready.Seconds())
	keeper := newLogKeeper(s.cl, v, ns)
	keeper.start(ctx)
	defer keeper.close()

	tokens := s.senderTokens(tb, ctx, ns, cfg.senders)
	url := "http://" + s.forward(tb, ctx) + "/mcp"
	for i, token := range tokens {
		waitLetIn(tb, ctx, url, token, fmt.Sprintf("sender-%d", i))
	}

	var problems []string
	var base *chaosSends
	if cfg.baseline {
		probe := startProbe(ctx, s.forward(tb, ctx))
		base = s.send(ctx, "b", url, tokens, members, cfg.delegations, cfg.spread)
		baseProbe := probe.stop()
		tb.Logf("baseline: %s; the gateway failed %d of %d probes", base.summary(), baseProbe.failed, baseProbe.probes)
		problems = append(problems, base.problems()...)
	}

	probe := startProbe(ctx, s.forward(tb, ctx))
	faults := s.startFaults(tb, ctx, ns, v, keeper)
	sends := s.send(ctx, "c", url, tokens, members, cfg.delegations, cfg.spread)
	faults.stop()
	// The Service is probed until the fleet is whole again: what a
	// client sees of the last kill counts too.
	if err := s.waitShared(cfg.replicas, 5*time.Minute); err != nil {
		problems = append(problems, "after the faults: "+err.Error())
		tb.Logf("after the faults:\n%s", diagnose(s.cl))
	}
	probed := probe.stop()
	tb.Logf("the Service's gateway failed %d of %d probes, in runs (start, length): %v", probed.failed, probed.probes, probed.runs)
	tb.Logf("with faults: %s", sends.summary())
	tb.Logf("faults:\n%s", strings.Join(faults.log(), "\n"))
	problems = append(problems, sends.problems()...)
	problems = append(problems, faults.problems...)

	// What the API server and the agents' logs say.
	runs := []*chaosSends{sends}
	if base != nil {
		runs = append(runs, base)
	}
	problems = append(problems, s.checkDelegations(tb, ctx, ns, runs)...)
	keeper.stop()
	typedProblems, lost := s.checkTyped(tb, ctx, ns, keeper, runs)
	problems = append(problems, typedProblems...)
	if len(lost) > 0 {
		// The contract lets a turn end without a reply (TurnDone); the
		// scripted agent always replies, so these are replies it sent and
		// its sender never got: shown, not failed on.
		tb.Logf("%d replies the agents sent did not reach their senders (the Delegations settled TurnDone):\n%s", len(lost), strings.Join(lost, "\n"))
	}

	takeovers := faults.takeovers()
	if len(takeovers) > 0 {
		report(percentile(slices.Clone(takeovers), 0.5).Seconds(), "s-takeover-p50")
		report(slices.Max(takeovers).Seconds(), "s-takeover-max")
	}
	report(float64(len(takeovers)), "replica-deaths")
	if out := faults.outOfServiceTimes(); len(out) > 0 {
		report(slices.Max(out).Seconds(), "s-lost-replica-in-service-max")
	}
	report(float64(faults.count("pod")), "member-pod-kills")
	report(float64(faults.count("node")), "node-kills")
	report(float64(len(lost)), "replies-lost")
	report(float64(probed.failed), "probes-failed")
	report(float64(probed.probes), "probes")
	report(probed.longest.Seconds(), "s-unavailable-longest")
	report(sends.throughput(), "delegations/s-faults")
	report(percentile(sends.latencies(), 0.50).Seconds(), "s-delegation-p50-faults")
	report(percentile(sends.latencies(), 0.99).Seconds(), "s-delegation-p99-faults")
	if base != nil {
		report(base.throughput(), "delegations/s-baseline")
		report(sends.throughput()/base.throughput(), "throughput-faults/baseline")
		report(percentile(base.latencies(), 0.50).Seconds(), "s-delegation-p50-baseline")
		report(percentile(base.latencies(), 0.99).Seconds(), "s-delegation-p99-baseline")
		report(float64(percentile(sends.latencies(), 0.50))/float64(percentile(base.latencies(), 0.50)), "latency-p50-faults/baseline")
	}
	for outcome, n := range sends.outcomes() {
		report(float64(n), "outcome-"+outcome)
	}
	for event, n := range sends.events() {
		report(float64(n), "retries-"+event)
	}
	tb.Logf("figures: %s", strings.Join(figures, ", "))
	tb.Logf("takeovers: %v", takeovers)
	if len(problems) > 0 {
		tb.Fatalf("%d problems:\n%s", len(problems), strings.Join(problems[:min(len(problems), 60)], "\n"))
	}
}

// forward relays a local port to the gateway Service (each connection
// balanced by kube-proxy to a replica) until ctx ends.
func (s *chaosSoak) forward(tb testing.TB, ctx context.Context) string {
	tb.Helper()
	addr, err := s.cl.Forward(ctx, s.gateway)
	if err != nil {
		tb.Fatal(err)
	}
	return addr
}

// senderTokens makes n service accounts in ns allowed to delegate and
// manage members there, and mints a gateway token for each.
func (s *chaosSoak) senderTokens(tb testing.TB, ctx context.Context, ns string, n int) []string {
	tb.Helper()
	kc := s.r.kube
	var tokens []string
	for i := range n {
		name := fmt.Sprintf("sender-%d", i)
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			tb.Fatal(err)
		}
		for suffix, role := range map[string]string{"-delegates": "fleetd-delegator", "-manages": "fleetd-fleet-manager"} {
			rb := &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: name + suffix, Namespace: ns},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
			}
			if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				tb.Fatal(err)
			}
		}
		tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{fleetv1alpha1.GatewayAudience},
			ExpirationSeconds: ptr.To[int64](4 * 3600),
		}}, metav1.CreateOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		tokens = append(tokens, tr.Status.Token)
	}
	return tokens
}

// waitLetIn waits until the gateway lets token in (its RoleBindings may
// reach the authorizer after the first call, and a refusal is remembered
// for a few seconds).
func waitLetIn(tb testing.TB, ctx context.Context, url, token, who string) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := func() error {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			sess, err := mcpclient.Connect(cctx, url, token)
			if err != nil {
				return err
			}
			defer sess.Close()
			r, err := mcpclient.Call(cctx, sess, "bridge_whoami", nil)
			if err != nil {
				return err
			}
			if r.IsError {
				return fmt.Errorf("bridge_whoami: %v %s", r.Fields, r.Text)
			}
			return nil
		}()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the gateway does not let %s in: %v", who, err)
		}
		time.Sleep(time.Second)
	}
}

// shardHolders maps each shard to the identity its Lease names ("" for
// none).
func (s *chaosSoak) shardHolders(ctx context.Context) (map[int]string, error) {
	leases, err := s.shardLeases(ctx)
	if err != nil {
		return nil, err
	}
	return shard.Holders(leases), nil
}

// shardLeases are the shards' Leases by shard.
func (s *chaosSoak) shardLeases(ctx context.Context) (map[int]*coordinationv1.Lease, error) {
	leases, err := s.r.kube.CoordinationV1().Leases(fleetdNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: fleetv1alpha1.LabelLease + "=" + shard.LeaseShard,
	})
	if err != nil {
		return nil, err
	}
	return shard.ByShard(leases.Items, shard.DefaultCount), nil
}

// processOf reports whether replica identity id is pod's: a replica is
// named after its pod.
func processOf(id, pod string) bool { return id == pod || strings.HasPrefix(id, pod+"-") }

// identitiesOf are the replica identities that are processes of pod: its
// replica Leases and the shard holders it names.
func (s *chaosSoak) identitiesOf(ctx context.Context, pod string) map[string]bool {
	out := map[string]bool{}
	leases, err := s.r.kube.CoordinationV1().Leases(fleetdNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return out
	}
	for _, l := range leases.Items {
		if id, ok := strings.CutPrefix(l.Name, "fleetd-replica-"); ok && processOf(id, pod) {
			out[id] = true
		}
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); processOf(h, pod) && l.Labels[fleetv1alpha1.LabelLease] == shard.LeaseShard {
			out[h] = true
		}
	}
	return out
}

// fleetdPods are fleetd's pods, and which of them are ready: running,
// every container ready, not being deleted.
func (s *chaosSoak) fleetdPods(ctx context.Context) (all, ready []corev1.Pod, err error) {
	pods, err := s.r.kube.CoreV1().Pods(fleetdNamespace).List(ctx, metav1.ListOptions{LabelSelector: fleetdSelector})
	if err != nil {
		return nil, nil, err
	}
	for _, p := range pods.Items {
		all = append(all, p)
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && allContainersReady(&p) {
			ready = append(ready, p)
		}
	}
	return all, ready, nil
}

// podReady reports whether p's Ready condition is True: the Service
// sends it clients.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func allContainersReady(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return true
}

// waitShared waits until replicas fleetd pods are ready and every shard is
// held by one of them, each holding some.
func (s *chaosSoak) waitShared(replicas int, within time.Duration) error {
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		why := func() string {
			_, ready, err := s.fleetdPods(ctx)
			if err != nil {
				return err.Error()
			}
			if len(ready) != replicas {
				return fmt.Sprintf("%d of %d replicas ready", len(ready), replicas)
			}
			holders, err := s.shardHolders(ctx)
			if err != nil {
				return err.Error()
			}
			per := map[string]int{}
			for i := range shard.DefaultCount {
				h := holders[i]
				owner := ""
				for _, p := range ready {
					if processOf(h, p.Name) {
						owner = p.Name
					}
				}
				if h == "" || owner == "" {
					return fmt.Sprintf("shard %d held by %q", i, h)
				}
				per[owner]++
			}
			if len(per) != replicas {
				return fmt.Sprintf("shards per replica: %v", per)
			}
			return ""
		}()
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the shards are not shared out by %d live replicas after %s: %s", replicas, within, why)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// probeResult is what the Service's probe saw.
type probeResult struct {
	probes, failed int
	// longest is the longest run of failed probes, from the first's start
	// to the next success's.
	longest time.Duration
	// runs are the runs of failed probes: when each began, how long.
	runs []string
}

func (p *probeResult) ended(since, at time.Time) {
	p.longest = max(p.longest, at.Sub(since))
	p.runs = append(p.runs, fmt.Sprintf("%s %.2fs", since.Format("15:04:05.000"), at.Sub(since).Seconds()))
}

type prober struct {
	stopped chan struct{}
	done    chan probeResult
}

// startProbe GETs /readyz on a fresh connection to the Service (through
// the relay at addr) every 100 ms, as a client that knows no replica.
func startProbe(ctx context.Context, addr string) *prober {
	p := &prober{stopped: make(chan struct{}), done: make(chan probeResult, 1)}
	go func() {
		hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		var res probeResult
		var failingSince time.Time
		for {
			select {
			case <-p.stopped:
				if !failingSince.IsZero() {
					res.ended(failingSince, time.Now())
				}
				p.done <- res
				return
			case <-ctx.Done():
				p.done <- res
				return
			default:
			}
			at := time.Now()
			res.probes++
			ok := false
			resp, err := hc.Get("http://" + addr + "/readyz")
			if err == nil {
				ok = resp.StatusCode == http.StatusOK
				resp.Body.Close()
			}
			switch {
			case !ok:
				res.failed++
				if failingSince.IsZero() {
					failingSince = at
				}
			case !failingSince.IsZero():
				res.ended(failingSince, at)
				failingSince = time.Time{}
			}
			time.Sleep(time.Until(at.Add(100 * time.Millisecond)))
		}
	}()
	return p
}

func (p *prober) stop() probeResult {
	close(p.stopped)
	return <-p.done
}

// chaosMsg is one message a sender sends, and what became of it.
type chaosMsg struct {
	id, member, prompt string
	// k numbers the message in its run; sender is the sender's.
	k, sender int
	// dispatchID is the Delegation, once a result named it.
	dispatchID string
	// outcome is the final outcome: reply, turn_done, or the error code
	// (worker_gone, delivery_failed, ...); text its text.
	outcome, text string
	// events are the calls that ended without an outcome, in order.
	events     []string
	start, end time.Time
}

// chaosSends is one run of sends.
type chaosSends struct {
	prefix string
	msgs   []*chaosMsg
}

// send has one sender per token send n held messages ("reply: <id>", ids
// prefix-NNNNN), message k to member k mod len(members) by sender k mod
// senders, inFlight at once per sender, message k not before start + k/n
// of spread, and returns when every message has a final outcome.
func (s *chaosSoak) send(ctx context.Context, prefix, url string, tokens, members []string, n int, spread time.Duration) *chaosSends {
	out := &chaosSends{prefix: prefix}
	queues := make([][]*chaosMsg, len(tokens))
	for k := range n {
		id := fmt.Sprintf("%s-%05d", prefix, k)
		m := &chaosMsg{id: id, member: members[k%len(members)], prompt: "reply: " + id, k: k, sender: k % len(tokens)}
		out.msgs = append(out.msgs, m)
		queues[m.sender] = append(queues[m.sender], m)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i, token := range tokens {
		next := make(chan *chaosMsg)
		wg.Go(func() {
			defer close(next)
			for _, m := range queues[i] {
				time.Sleep(time.Until(start.Add(spread * time.Duration(m.k) / time.Duration(n))))
				next <- m
			}
		})
		for range s.cfg.inFlight {
			wg.Go(func() {
				c := &chaosClient{url: url, token: token}
				defer c.reset()
				for m := range next {
					c.deliver(ctx, m)
				}
			})
		}
	}
	wg.Wait()
	return out
}

// chaosClient is one slot of a sender: a session with the gateway, opened
// anew after each call that ended without an outcome.
type chaosClient struct {
	url, token string
	sess       *mcp.ClientSession
}

func (c *chaosClient) reset() {
	if c.sess != nil {
		// Closing a session whose connection is gone may hang.
		go c.sess.Close()
		c.sess = nil
	}
}

func (c *chaosClient) connect(ctx context.Context) error {
	if c.sess != nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	sess, err := mcpclient.Connect(cctx, c.url, c.token)
	if err != nil {
		return err
	}
	c.sess = sess
	return nil
}

// retryable are the error codes a sender tries again on: the gateway may
// be between replicas, or not yet see a message another one created.
var retryable = map[string]bool{"internal": true, "unauthorized": true, "throttled": true, "rate_limited": true, "not_found": true}

// deliver sends m held and waits for its final outcome: a first call with
// the message's idempotency key (sent again, it re-attaches to the same
// message rather than sending another), then re-attaches by dispatchId.
func (c *chaosClient) deliver(ctx context.Context, m *chaosMsg) {
	m.start = time.Now()
	defer func() { m.end = time.Now() }()
	giveUp := m.start.Add(chaosGiveUp)
	for ctx.Err() == nil {
		if time.Now().After(giveUp) {
			m.outcome, m.text = "gave_up", strings.Join(m.events, "; ")
			return
		}
		if err := c.connect(ctx); err != nil {
			m.events = append(m.events, "connect")
			time.Sleep(250 * time.Millisecond)
			continue
		}
		args := map[string]any{"sessionId": m.member, "content": m.prompt, "idempotencyKey": m.id, "timeoutMs": chaosHold.Milliseconds()}
		if m.dispatchID != "" {
			args = map[string]any{"dispatchId": m.dispatchID, "timeoutMs": chaosRejoin.Milliseconds()}
		}
		cctx, cancel := context.WithTimeout(ctx, chaosGuard)
		r, err := mcpclient.Call(cctx, c.sess, "bridge_send", args)
		cancel()
		if err != nil {
			m.events = append(m.events, "transport")
			c.reset()
			continue
		}
		if id := r.Str("dispatchId"); id != "" {
			m.dispatchID = id
		}
		if r.IsError {
			code := cmp.Or(r.ErrorCode(), "error")
			if retryable[code] {
				m.events = append(m.events, code)
				c.reset()
				time.Sleep(500 * time.Millisecond)
				continue
			}
			m.outcome, m.text = code, r.Text
			return
		}
		switch out := r.Str("outcome"); out {
		case "interrupted", "timeout":
			m.events = append(m.events, out)
			c.reset()
		default:
			m.outcome, m.text = out, r.Str("text")
			return
		}
	}
	m.outcome = cmp.Or(m.outcome, "stopped")
}

func (s *chaosSends) throughput() float64 {
	first, last := s.msgs[0].start, s.msgs[0].end
	for _, m := range s.msgs {
		first = minTime(first, m.start)
		if m.end.After(last) {
			last = m.end
		}
	}
	return float64(len(s.msgs)) / last.Sub(first).Seconds()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (s *chaosSends) latencies() []time.Duration {
	var out []time.Duration
	for _, m := range s.msgs {
		out = append(out, m.end.Sub(m.start))
	}
	return out
}

func (s *chaosSends) outcomes() map[string]int {
	out := map[string]int{}
	for _, m := range s.msgs {
		out[m.outcome]++
	}
	return out
}

func (s *chaosSends) events() map[string]int {
	out := map[string]int{}
	for _, m := range s.msgs {
		for _, e := range m.events {
			out[e]++
		}
	}
	return out
}

func (s *chaosSends) summary() string {
	return fmt.Sprintf("%d messages, %.2f/s, latency p50 %.2fs p99 %.2fs, outcomes %v, calls without an outcome %v",
		len(s.msgs), s.throughput(), percentile(s.latencies(), 0.5).Seconds(), percentile(s.latencies(), 0.99).Seconds(), s.outcomes(), s.events())
}

// allowedOutcomes are what a sender may get under these faults: the reply,
// the turn's end, or the member's Pod (or pane) lost, or a delivery the
// controller could not prove (a replica died while typing it).
var allowedOutcomes = map[string]bool{"reply": true, "turn_done": true, "worker_gone": true, "delivery_failed": true}

// problems are the messages whose sender got an outcome it may not, or
// a reply with another text.
func (s *chaosSends) problems() []string {
	var out []string
	for _, m := range s.msgs {
		switch {
		case !allowedOutcomes[m.outcome]:
			out = append(out, fmt.Sprintf("message %s to %s: its sender got %q (%s) after %v", m.id, m.member, m.outcome, m.text, m.events))
		case m.outcome == "reply" && m.text != m.id:
			out = append(out, fmt.Sprintf("message %s to %s: its sender got the reply %q", m.id, m.member, m.text))
		}
	}
	return out
}

// checkDelegations checks each message against its Delegation: one each,
// settled in a phase the contract allows, and a reply recorded reached its
// sender.
func (s *chaosSoak) checkDelegations(tb testing.TB, ctx context.Context, ns string, runs []*chaosSends) []string {
	tb.Helper()
	var list fleetv1alpha1.DelegationList
	if err := s.r.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		tb.Fatal(err)
	}
	byContent := map[string][]*fleetv1alpha1.Delegation{}
	for i := range list.Items {
		d := &list.Items[i]
		byContent[d.Spec.Content] = append(byContent[d.Spec.Content], d)
	}
	var problems []string
	phases := map[string]int{}
	for _, run := range runs {
		for _, m := range run.msgs {
			ds := byContent[m.prompt]
			if len(ds) != 1 {
				var names []string
				for _, d := range ds {
					names = append(names, d.Name+" "+string(d.Status.Phase))
				}
				problems = append(problems, fmt.Sprintf("message %s: %d Delegations %v, want 1", m.id, len(ds), names))
				continue
			}
			d := ds[0]
			reason := settledReason(d)
			phases[string(d.Status.Phase)+"/"+reason]++
			if m.dispatchID != "" && m.dispatchID != d.Name {
				problems = append(problems, fmt.Sprintf("message %s: its sender was told dispatchId %s, the Delegation is %s", m.id, m.dispatchID, d.Name))
			}
			if !allowedPhase(d) {
				problems = append(problems, fmt.Sprintf("message %s: Delegation %s/%s to %s settled %s (%s: %s)", m.id, ns, d.Name, d.Spec.To, d.Status.Phase, reason, delegation.SettledMessage(d, "")))
				continue
			}
			if d.Status.Reply != nil && (m.outcome != "reply" || m.text != *d.Status.Reply) {
				problems = append(problems, fmt.Sprintf("message %s: Delegation %s/%s %s has the reply %q, its sender got %s %q (calls without an outcome: %v)",
					m.id, ns, d.Name, d.Status.Phase, *d.Status.Reply, m.outcome, m.text, m.events))
			}
			if want := phaseOutcome(d); want != m.outcome {
				problems = append(problems, fmt.Sprintf("message %s: Delegation %s/%s settled %s, its sender got %s", m.id, ns, d.Name, d.Status.Phase, m.outcome))
			}
		}
	}
	tb.Logf("Delegations by phase/reason: %v", phases)
	return problems
}

func stamp(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format("15:04:05")
}

// settledReason is the reason of d's Settled condition.
func settledReason(d *fleetv1alpha1.Delegation) string {
	for _, c := range d.Status.Conditions {
		if c.Type == fleetv1alpha1.ConditionSettled {
			return c.Reason
		}
	}
	return ""
}

// allowedPhase: a Delegation under these faults ends Replied, TurnDone,
// WorkerGone (its member's Pod or pane went away), or Failed because a
// replica died while typing it and no pickup proves it was typed
// (DeliveryUnconfirmed) or herdr refused it (DeliveryRefused). Nobody
// cancels, and no deadline is near.
func allowedPhase(d *fleetv1alpha1.Delegation) bool {
	switch d.Status.Phase {
	case fleetv1alpha1.DelegationReplied, fleetv1alpha1.DelegationTurnDone, fleetv1alpha1.DelegationWorkerGone:
		return true
	case fleetv1alpha1.DelegationFailed:
		r := settledReason(d)
		return r == fleetv1alpha1.ReasonDeliveryUnconfirmed || r == fleetv1alpha1.ReasonDeliveryRefused
	}
	return false
}

// phaseOutcome is what the sender of d, as it settled, gets.
func phaseOutcome(d *fleetv1alpha1.Delegation) string {
	switch {
	case d.Status.Reply != nil:
		return "reply"
	case d.Status.Phase == fleetv1alpha1.DelegationTurnDone:
		return "turn_done"
	case d.Status.Phase == fleetv1alpha1.DelegationWorkerGone:
		return "worker_gone"
	case d.Status.Phase == fleetv1alpha1.DelegationFailed:
		return "delivery_failed"
	}
	return strings.ToLower(string(d.Status.Phase))
}

// checkTyped checks what the agents received, all Pods of a member
// together: no prompt twice, none sent to another member, every one that
// was replied to or whose turn ended there, and each member's in the order
// of its queue. It returns too the prompts typed whose agent's reply was
// lost on the way (bridge_reply failed, as the turn's tail shows).
func (s *chaosSoak) checkTyped(tb testing.TB, ctx context.Context, ns string, keeper *logKeeper, runs []*chaosSends) (problems, lost []string) {
	tb.Helper()
	var list fleetv1alpha1.DelegationList
	if err := s.r.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		tb.Fatal(err)
	}
	queues := map[string][]fleetv1alpha1.Delegation{}
	for _, d := range list.Items {
		queues[d.Spec.To] = append(queues[d.Spec.To], d)
	}
	sentTo := map[string]string{}
	for _, run := range runs {
		for _, m := range run.msgs {
			sentTo[m.prompt] = m.member
		}
	}
	typed, unread := keeper.read()
	var unreplied []string
	defer func() {
		slices.Sort(unreplied)
		tb.Logf("%d Delegations not Replied:\n%s", len(unreplied), strings.Join(unreplied, "\n"))
	}()
	for _, u := range unread {
		tb.Logf("a member Pod's received log was never read (no prompt reached it before it went, or it went too fast): %s", u)
	}
	for member, q := range queues {
		delegation.SortQueue(q)
		place := map[string]int{}
		for i, d := range q {
			place[d.Spec.Content] = i
		}
		seen := map[string][]receivedAt{}
		last, lastText := -1, ""
		for _, e := range typed[member] {
			seen[e.text] = append(seen[e.text], e)
			if to, ok := sentTo[e.text]; !ok || to != member {
				problems = append(problems, fmt.Sprintf("%s/%s received %q, sent to %q (pod %s at %s)", ns, member, e.text, to, e.pod, e.at.Format(time.RFC3339Nano)))
				continue
			}
			i, ok := place[e.text]
			if !ok || len(seen[e.text]) > 1 {
				continue
			}
			if i < last {
				problems = append(problems, fmt.Sprintf("%s/%s received %q (queue place %d, pod %s at %s) after %q (queue place %d)",
					ns, member, e.text, i, e.pod, e.at.Format(time.RFC3339Nano), lastText, last))
			}
			last, lastText = max(last, i), e.text
		}
		for text, at := range seen {
			if len(at) > 1 {
				var where []string
				for _, e := range at {
					where = append(where, fmt.Sprintf("pod %s seq %d at %s", e.pod, e.seq, e.at.Format(time.RFC3339Nano)))
				}
				problems = append(problems, fmt.Sprintf("%s/%s received %q %d times: %s", ns, member, text, len(at), strings.Join(where, "; ")))
			}
		}
		for _, d := range q {
			if d.Status.Phase != fleetv1alpha1.DelegationReplied {
				var where []string
				for _, e := range seen[d.Spec.Content] {
					where = append(where, fmt.Sprintf("pod %s at %s", e.pod, e.at.Format("15:04:05.000")))
				}
				unreplied = append(unreplied, fmt.Sprintf("%s %q to %s: %s/%s %q; typed %d times %v; created %s, delivering %s, picked up %s, settled %s; tail %q",
					d.Name, d.Spec.Content, member, d.Status.Phase, settledReason(&d), delegation.SettledMessage(&d, ""), len(where), where,
					d.CreationTimestamp.Format("15:04:05"), stamp(d.Status.DeliveringAt), stamp(d.Status.PickedUpAt), stamp(d.Status.SettledAt), lastLine(ptrString(d.Status.Tail))))
				if tail := lastLine(ptrString(d.Status.Tail)); d.Status.Phase == fleetv1alpha1.DelegationTurnDone && len(seen[d.Spec.Content]) > 0 && strings.Contains(tail, "bridge_reply") {
					lost = append(lost, fmt.Sprintf("%s/%s %q to %s, typed at %s: %s", ns, d.Name, d.Spec.Content, member, seen[d.Spec.Content][0].at.Format("15:04:05.000"), tail))
				}
			}
			if len(seen[d.Spec.Content]) > 0 {
				continue
			}
			if d.Status.Phase == fleetv1alpha1.DelegationReplied || d.Status.Phase == fleetv1alpha1.DelegationTurnDone {
				problems = append(problems, fmt.Sprintf("%s/%s: Delegation %s %q settled %s but is in none of the member's received logs read (pods %v)",
					ns, member, d.Name, d.Spec.Content, d.Status.Phase, keeper.podsOf(member)))
			}
		}
	}
	return problems, lost
}

// faults is the loop that kills replicas, member Pods and a node.
type faults struct {
	s      *chaosSoak
	ns     string
	v      cache.Cache
	keeper *logKeeper
	start  time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// killing is held while a replica is picked and killed, and through a
	// node's loss: one replica down at a time.
	killing sync.Mutex

	mu       sync.Mutex
	entries  []string
	kinds    map[string]int
	downNode string
	taken    []time.Duration
	// outOfService is how long each replica lost with its node stayed in
	// the Service.
	outOfService []time.Duration
	problems     []string
}

// startFaults starts the loop: a replica every replicaEvery (alternately
// SIGQUIT to the fleetd container's process, an instant crash, and a
// forced delete of its Pod), a member's Pod every podEvery, and once, at
// nodeKillAt, a node with member Pods on it.
func (s *chaosSoak) startFaults(tb testing.TB, ctx context.Context, ns string, v cache.Cache, keeper *logKeeper) *faults {
	ctx, cancel := context.WithCancel(ctx)
	f := &faults{s: s, ns: ns, v: v, keeper: keeper, start: time.Now(), cancel: cancel, kinds: map[string]int{}}
	if s.cfg.replicaEvery > 0 {
		f.wg.Go(func() {
			for n := 0; sleepCtx(ctx, s.cfg.replicaEvery); n++ {
				f.killReplica(ctx, n%2 == 0)
			}
		})
	}
	if s.cfg.podEvery > 0 {
		f.wg.Go(func() {
			for sleepCtx(ctx, s.cfg.podEvery) {
				f.killMemberPod(ctx)
			}
		})
	}
	if s.cfg.nodeKillAt > 0 {
		f.wg.Go(func() {
			if sleepCtx(ctx, s.cfg.nodeKillAt) {
				f.killNode(ctx)
			}
		})
	}
	return f
}

// sleepCtx sleeps d, and says whether ctx is still on.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// stop ends the loop, and waits for a node killed to be booted and for
// each takeover measured.
func (f *faults) stop() {
	f.cancel()
	f.wg.Wait()
}

func (f *faults) note(kind, format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if kind != "" {
		f.kinds[kind]++
	}
	now := time.Now()
	f.entries = append(f.entries, fmt.Sprintf("%6.1fs (%s) %s", now.Sub(f.start).Seconds(), now.Format("15:04:05.000"), fmt.Sprintf(format, args...)))
}

func (f *faults) problem(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
}

func (f *faults) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

func (f *faults) count(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kinds[kind]
}

func (f *faults) outOfServiceTimes() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.outOfService)
}

func (f *faults) takeovers() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.taken)
}

// allReady waits until every fleetd replica is ready, and returns them
// (nil when ctx ended first).
func (f *faults) allReady(ctx context.Context) []corev1.Pod {
	for {
		_, ready, err := f.s.fleetdPods(ctx)
		if err == nil && len(ready) == f.s.cfg.replicas {
			return ready
		}
		if !sleepCtx(ctx, time.Second) {
			return nil
		}
	}
}

// killReplica kills one ready fleetd replica, once all are ready (so that
// two stay live), and measures its shards' takeover.
func (f *faults) killReplica(ctx context.Context, crash bool) {
	s := f.s
	f.killing.Lock()
	defer f.killing.Unlock()
	ready := f.allReady(ctx)
	if ready == nil {
		return
	}
	victim := ready[rand.IntN(len(ready))]
	dead := s.identitiesOf(ctx, victim.Name)
	killed := time.Now()
	if crash {
		out, err := kubectlErr(s.cl, "-n", fleetdNamespace, "exec", victim.Name, "-c", "fleetd", "--", "sh", "-c", "kill -s QUIT 1")
		f.note("replica", "replica %s (on %s): SIGQUIT to its fleetd process (identities %v) %v %s", victim.Name, victim.Spec.NodeName, keys(dead), errOrEmpty(err), strings.TrimSpace(out))
	} else {
		out, err := kubectlErr(s.cl, "-n", fleetdNamespace, "delete", "pod", victim.Name, "--grace-period=0", "--force", "--wait=false")
		f.note("replica", "replica %s (on %s): forced delete (identities %v) %v %s", victim.Name, victim.Spec.NodeName, keys(dead), errOrEmpty(err), strings.TrimSpace(out))
	}
	f.wg.Go(func() { f.measureTakeover(victim.Name, killed, dead) })
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return "error: " + err.Error()
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// measureTakeover polls the shard Leases every 100 ms until every shard is
// held, and none held by one of dead at the kill is held by it still but
// from before the kill: a replica whose container starts again keeps its
// name, and takes its shards again (their Leases say since when).
func (f *faults) measureTakeover(what string, killed time.Time, dead map[string]bool) {
	ctx := context.Background()
	deadline := killed.Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		leases, err := f.s.shardLeases(ctx)
		if err == nil {
			held := len(leases) == shard.DefaultCount
			for _, l := range leases {
				h := ptr.Deref(l.Spec.HolderIdentity, "")
				if h == "" || dead[h] && (l.Spec.AcquireTime == nil || l.Spec.AcquireTime.Time.Before(killed)) {
					held = false
				}
			}
			if held {
				took := time.Since(killed)
				f.mu.Lock()
				f.taken = append(f.taken, took)
				f.mu.Unlock()
				f.note("", "%s's shards all held by live replicas %.2fs after the kill", what, took.Seconds())
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.note("", "%s's shards NOT all taken over 3 minutes after the kill", what)
	f.problem("the shards of %s (identities %v) were not all held by live replicas 3 minutes after it was killed", what, keys(dead))
}

// measureOutOfService polls the Pod of a replica lost with its node every
// 100 ms until it is no longer Ready, and so out of the Service. A live
// replica should take it out (its readiness gate False, Unreachable)
// within seconds; without that the node controller would, once the node's
// monitor grace period ran out, and the Service sends the dead replica a
// share of new connections until then.
func (f *faults) measureOutOfService(pod string, killed time.Time) {
	ctx := context.Background()
	for deadline := killed.Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		p, err := f.s.r.kube.CoreV1().Pods(fleetdNamespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			continue
		}
		conds := map[corev1.PodConditionType]corev1.PodCondition{}
		for _, c := range p.Status.Conditions {
			conds[c.Type] = c
		}
		if conds[corev1.PodReady].Status == corev1.ConditionTrue {
			continue
		}
		took := time.Since(killed)
		gate := conds[rotation.Gate]
		if gate.Status != corev1.ConditionFalse || gate.Reason != "Unreachable" {
			f.note("", "replica %s left the Service %.2fs after its node was killed, not taken out by a live replica (Ready: %s %s)", pod, took.Seconds(), conds[corev1.PodReady].Reason, conds[corev1.PodReady].Message)
			f.problem("replica %s, lost with its node, was not taken out of the Service by a live replica (it left %.2fs after the kill: %s)", pod, took.Seconds(), conds[corev1.PodReady].Reason)
			return
		}
		f.mu.Lock()
		f.outOfService = append(f.outOfService, took)
		f.mu.Unlock()
		f.note("", "replica %s out of the Service %.2fs after its node was killed: %s", pod, took.Seconds(), gate.Message)
		return
	}
	f.problem("replica %s, lost with its node, was still Ready a minute after the kill", pod)
}

// killMemberPod deletes the Pod of a random member whose Pod is running,
// its received log opened first.
func (f *faults) killMemberPod(ctx context.Context) {
	var pods corev1.PodList
	if err := f.v.List(ctx, &pods, client.InNamespace(f.ns)); err != nil {
		f.note("", "listing member pods: %v", err)
		return
	}
	f.mu.Lock()
	down := f.downNode
	f.mu.Unlock()
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.Spec.NodeName != down && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Labels[fleetv1alpha1.LabelMember] != "" && allContainersReady(&p) {
			running = append(running, p)
		}
	}
	if len(running) == 0 {
		f.note("", "no member pod running to delete")
		return
	}
	victim := running[rand.IntN(len(running))]
	f.keeper.capture(&victim)
	err := f.s.r.c.Delete(ctx, &victim)
	f.note("pod", "member %s: deleted its pod %s on %s %s", victim.Labels[fleetv1alpha1.LabelMember], victim.Name, victim.Spec.NodeName, errOrEmpty(err))
}

// killNode kills a node with member Pods on it as a power loss would
// (neither the first, whose loss the relay to the Service may not
// survive, nor the only one with DNS), opens the received logs of its
// Pods, waits until its members run elsewhere (at most 90 s), and boots it
// again.
func (f *faults) killNode(ctx context.Context) {
	s := f.s
	// Not while a replica is down already.
	f.killing.Lock()
	defer f.killing.Unlock()
	if f.allReady(ctx) == nil {
		return
	}
	var pods corev1.PodList
	if err := f.v.List(ctx, &pods, client.InNamespace(f.ns)); err != nil {
		f.note("", "listing member pods: %v", err)
		return
	}
	members := map[string][]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			members[p.Spec.NodeName] = append(members[p.Spec.NodeName], p.Labels[fleetv1alpha1.LabelMember])
		}
	}
	dns, err := s.r.kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		f.note("", "listing DNS pods: %v", err)
		return
	}
	dnsNodes := map[string]bool{}
	for _, p := range dns.Items {
		dnsNodes[p.Spec.NodeName] = true
	}
	var victim string
	for _, n := range s.cl.NodeNames()[1:] {
		if len(dnsNodes) == 1 && dnsNodes[n] {
			continue
		}
		if victim == "" || len(members[n]) > len(members[victim]) {
			victim = n
		}
	}
	if victim == "" {
		f.note("", "no node to kill (DNS on %v)", keys(dnsNodes))
		return
	}
	all, _, _ := s.fleetdPods(ctx)
	dead := map[string]bool{}
	var replicas, inService []string
	for _, p := range all {
		if p.Spec.NodeName == victim {
			replicas = append(replicas, p.Name)
			if podReady(&p) {
				inService = append(inService, p.Name)
			}
			for id := range s.identitiesOf(ctx, p.Name) {
				dead[id] = true
			}
		}
	}
	f.mu.Lock()
	f.downNode = victim
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.downNode = ""
		f.mu.Unlock()
	}()
	killed := time.Now()
	if err := s.cl.KillNode(victim); err != nil {
		f.note("", "killing node %s: %v", victim, err)
		f.problem("killing node %s: %v", victim, err)
		return
	}
	f.note("node", "node %s killed: members %v, fleetd replicas %v (identities %v)", victim, members[victim], replicas, keys(dead))
	if len(dead) > 0 {
		f.wg.Go(func() { f.measureTakeover("node "+victim+"'s replica", killed, dead) })
	}
	for _, name := range inService {
		f.wg.Go(func() { f.measureOutOfService(name, killed) })
	}
	f.keeper.captureNode(victim)
	// Its members run elsewhere before it comes back (at most 90 s).
	moved := false
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline) && !moved; time.Sleep(time.Second) {
		var list fleetv1alpha1.MemberList
		if err := f.v.List(context.Background(), &list, client.InNamespace(f.ns)); err != nil {
			continue
		}
		moved = true
		for _, m := range list.Items {
			if slices.Contains(members[victim], m.Name) && (m.Status.NodeName == victim || !memberReady(&m)) {
				moved = false
			}
		}
	}
	f.note("", "node %s: its members Ready elsewhere: %v (%.1fs after the kill)", victim, moved, time.Since(killed).Seconds())
	if err := s.cl.StartNode(context.Background(), victim); err != nil {
		f.note("", "booting node %s again: %v", victim, err)
		f.problem("booting node %s again: %v", victim, err)
		return
	}
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if ready, err := s.cl.NodeReady(context.Background(), victim); err == nil && ready {
			f.note("", "node %s booted and Ready again (%.1fs after the kill)", victim, time.Since(killed).Seconds())
			return
		}
	}
	f.note("", "node %s not Ready 3 minutes after it was booted", victim)
	f.problem("node %s not Ready 3 minutes after it was booted again", victim)
}
