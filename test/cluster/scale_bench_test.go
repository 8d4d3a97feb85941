package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/internal/scheme"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/test/framework/localcluster"
)

// The scale run's size.
const (
	scaleMembers = 150
	// scaleDelegations are spread over the members, 6 or 7 each.
	scaleDelegations = 1000
	// scaleSmallDelegations is the throughput baseline: fewer than one a
	// member, so no member queues.
	scaleSmallDelegations = 100
	// scaleBaseDelegations go to the one-member baseline: about what each
	// of the 150 gets (7.3 of the 1,100), so both end on the same work.
	scaleBaseDelegations = 7
	// scaleSettle is how long memory is left to settle after the last
	// member Ready or delegation Replied, before it is read.
	scaleSettle = 10 * time.Second
	// scaleWorkers create objects at once, as many clients would.
	scaleWorkers = 16
)

// receivedLog is where each scripted member records the prompts it got:
// its workspace, an emptyDir the test reads on the node's disk.
const receivedLog = "/workspace/received.log"

// BenchmarkScale deploys fleetd with config/default on the 3-node test
// cluster (members in Pods of their own) and measures, against baselines
// in the same run:
//
//   - 150 scripted members: seconds from the first create to all Ready,
//     against one member alone (ready-150/1), and how much of it their
//     Pods took to be Ready (Kubernetes' share, before fleetd's panes);
//   - memory per member Pod (the resident memory of its processes, read
//     from the Pod's cgroup), idle and after its share of the delegations,
//     against the one-member baseline after the same work;
//   - fleetd's container: resident memory and open TCP connections by peer
//     (API server, pane hosts, gateway clients) with 1 member and with
//     150, and the most seen while the delegations ran; and the TCP
//     connections its Pod dials and accepts per member start and per
//     Delegation (calls to a pane host share one connection);
//   - 100 and then 1,000 detached Delegations ("reply: N") spread over the
//     150: seconds from the first create to all Replied, throughput, the
//     ratio of the two throughputs, and each Delegation's own latency;
//   - API requests per Delegation, from the API server's own
//     apiserver_request_total, all callers: writes (POST, PUT, PATCH, APPLY,
//     DELETE) to delegations, members, pods and events, reads (GET, LIST)
//     of them, and the gateway's TokenReviews and SubjectAccessReviews.
//
// It fails if a member is not Ready in time, a Delegation does not end
// Replied with its own reply, or a member's agent did not receive each of
// its prompts exactly once. Timing belongs here, not in a test. It takes
// 10 to 15 minutes on a 2-core machine, so -bench BenchmarkScale runs it
// alone.
func BenchmarkScale(b *testing.B) {
	requireCluster(b)
	cl := up(b)
	loadImages(b, "fleetd")
	deployFleetd(b, cl)
	run := newScaleRun(b, cl)
	round := 0
	for b.Loop() {
		round++
		run.round(b, round)
	}
}

// deployFleetd applies config/default, waits for fleetd to roll out, and
// removes it when the benchmark ends.
func deployFleetd(b testing.TB, cl *localcluster.Cluster) {
	b.Helper()
	def := filepath.Join(testenv.RepoRoot(), "config", "default")
	kubectl(b, cl, "apply", "-k", def)
	b.Cleanup(func() {
		if out, err := kubectlErr(cl, "delete", "-k", def, "--wait=true", "--timeout=120s"); err != nil {
			b.Logf("removing fleetd: %v\n%s", err, out)
		}
	})
	if out, err := kubectlErr(cl, "-n", "fleetd-system", "rollout", "status", "deployment/fleetd", "--timeout=180s"); err != nil {
		b.Fatalf("fleetd did not roll out: %v\n%s\n%s", err, out, diagnose(cl))
	}
}

// scaleRun is what one round of BenchmarkScale works with.
type scaleRun struct {
	cl   *localcluster.Cluster
	cfg  *rest.Config
	c    client.Client
	kube kubernetes.Interface
}

func newScaleRun(b testing.TB, cl *localcluster.Cluster) *scaleRun {
	b.Helper()
	cfg, err := cl.RESTConfig()
	if err != nil {
		b.Fatal(err)
	}
	// The watch of the benchmark's own cache has nothing to say here.
	logf.SetLogger(logr.Discard())
	// No client-side limit: 1,000 creates at once are the load measured.
	cfg.QPS = -1
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		b.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return &scaleRun{cl: cl, cfg: cfg, c: c, kube: kube}
}

// round runs the baseline and the 150 in namespaces of their own, and
// removes both at the end.
func (r *scaleRun) round(b *testing.B, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	baseNS, ns := fmt.Sprintf("scale-base-%d", n), fmt.Sprintf("scale-%d", n)
	v := r.namespaces(b, ctx, baseNS, ns)

	// One member alone: the baseline.
	base := memberNames(1)
	baseStart := r.startMembers(b, v, baseNS, base)
	time.Sleep(scaleSettle)
	baseFleetd := r.fleetd(b)
	baseIdle := r.podMemory(b, v, baseNS, base)
	baseSent := r.sendDelegations(b, v, baseNS, base, 0, scaleBaseDelegations)
	problems := append(baseSent.problems, r.checkReceived(b, v, baseNS, base, baseSent.prompts)...)
	time.Sleep(scaleSettle)
	baseWorked := r.podMemory(b, v, baseNS, base)
	// Gone before the 150 start, so fleetd's figures at 150 are theirs.
	r.deleteNamespace(b, baseNS)

	members := memberNames(scaleMembers)
	opened := r.fleetd(b).opens
	started := r.startMembers(b, v, ns, members)
	time.Sleep(scaleSettle)
	fleetd := r.fleetd(b)
	startOpens := fleetd.opens.minus(opened)
	idle := r.podMemory(b, v, ns, members)

	sampler := r.sampleFleetd(b)
	small := r.sendDelegations(b, v, ns, members, 0, scaleSmallDelegations)
	large := r.sendDelegations(b, v, ns, members, scaleSmallDelegations, scaleDelegations)
	most := sampler.stop()
	prompts := map[string][]string{}
	for _, sent := range []sentDelegations{small, large} {
		problems = append(problems, sent.problems...)
		for m, p := range sent.prompts {
			prompts[m] = append(prompts[m], p...)
		}
	}
	problems = append(problems, r.checkReceived(b, v, ns, members, prompts)...)
	time.Sleep(scaleSettle)
	worked := r.podMemory(b, v, ns, members)
	after := r.fleetd(b)

	mib := func(bytes float64) float64 { return bytes / (1 << 20) }
	// The figures go to the benchmark's line and, should a check below
	// fail, into the log: a failed benchmark prints no metrics.
	var figures []string
	report := func(v float64, unit string) {
		b.ReportMetric(v, unit)
		figures = append(figures, fmt.Sprintf("%.4g %s", v, unit))
	}
	report(baseStart.ready.Seconds(), "s-ready-1")
	report(started.ready.Seconds(), "s-ready-150")
	report(started.ready.Seconds()/baseStart.ready.Seconds(), "ready-150/1")
	report(started.podsReady.Seconds(), "s-pods-ready-150")
	report(percentile(started.latencies, 0.50).Seconds(), "s-member-ready-p50")
	report(percentile(started.latencies, 0.99).Seconds(), "s-member-ready-p99")
	report(float64(startOpens.active)/scaleMembers, "dials/member-start")

	report(mib(baseIdle.meanRSS()), "MiB-pod-rss-idle-1")
	report(mib(idle.meanRSS()), "MiB-pod-rss-idle-150")
	report(idle.meanRSS()/baseIdle.meanRSS(), "pod-rss-idle-150/1")
	report(mib(baseWorked.meanRSS()), "MiB-pod-rss-worked-1")
	report(mib(worked.meanRSS()), "MiB-pod-rss-worked-150")
	report(mib(worked.maxRSS()), "MiB-pod-rss-worked-150-max")
	report(worked.meanRSS()/baseWorked.meanRSS(), "pod-rss-worked-150/1")
	report(mib(baseWorked.meanAnon()), "MiB-pod-anon-worked-1")
	report(mib(worked.meanAnon()), "MiB-pod-anon-worked-150")

	report(mib(float64(baseFleetd.rss)), "MiB-fleetd-1")
	report(mib(float64(fleetd.rss)), "MiB-fleetd-150")
	report(float64(fleetd.rss)/float64(baseFleetd.rss), "fleetd-rss-150/1")
	report(float64(fleetd.rss-baseFleetd.rss)/(1<<10)/float64(scaleMembers-1), "KiB-fleetd/member")
	report(mib(float64(after.rss)), "MiB-fleetd-150-after")
	report(mib(float64(most.rss)), "MiB-fleetd-150-peak")
	report(float64(baseFleetd.conns.total()), "conns-fleetd-1")
	for _, f := range []struct {
		name  string
		conns peerCounts
	}{{"150", fleetd.conns}, {"150-peak", most.conns}} {
		report(float64(f.conns.total()), "conns-fleetd-"+f.name)
		for _, peer := range []string{peerPaneHost, peerGateway, peerAPIServer, peerOther} {
			report(float64(f.conns[peer]), "conns-fleetd-"+f.name+"-"+peer)
		}
	}

	for _, sent := range []sentDelegations{small, large} {
		n := strconv.Itoa(sent.n)
		report(sent.elapsed.Seconds(), "s-"+n+"-replied")
		report(sent.throughput(), "delegations/s-"+n)
		report(percentile(sent.latencies, 0.50).Seconds(), "s-delegation-p50-"+n)
		report(percentile(sent.latencies, 0.99).Seconds(), "s-delegation-p99-"+n)
		report(sent.requests.per(writesTo(writtenByDelegations...)), "writes/delegation-"+n)
		report(float64(sent.opens.active)/float64(sent.n), "dials/delegation-"+n)
		report(float64(sent.opens.passive)/float64(sent.n), "accepts/delegation-"+n)
	}
	report(large.throughput()/small.throughput(), "throughput-1000/100")
	for _, res := range writtenByDelegations {
		report(large.requests.per(writesTo(res)), res+"-writes/delegation")
	}
	report(large.requests.per(statusWritesTo("delegations")), "delegations-status-writes/delegation")
	report(large.requests.per(statusWritesTo("members")), "members-status-writes/delegation")
	report(large.requests.per(conflictsOn(writtenByDelegations...)), "conflicts/delegation")
	report(large.requests.per(readsOf(writtenByDelegations...)), "reads/delegation")
	report(large.requests.per(reviews), "reviews/delegation")

	if len(problems) > 0 {
		b.Logf("figures: %s", strings.Join(figures, ", "))
		b.Logf("fleetd's TCP connections by peer: 1 member %v; 150 members %v; 150 after the delegations %v; most while they ran %v",
			baseFleetd.conns, fleetd.conns, after.conns, most.conns)
		b.Logf("API requests for %d delegations:\n%s", large.n, large.requests)
		b.Fatalf("%d problems:\n%s", len(problems), strings.Join(problems[:min(len(problems), 40)], "\n"))
	}
}

func memberNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("m%03d", i)
	}
	return names
}

// namespaces creates namespaces, deletes them (and waits) when the round
// ends, and watches them.
func (r *scaleRun) namespaces(b testing.TB, ctx context.Context, names ...string) cache.Cache {
	b.Helper()
	for _, name := range names {
		if err := r.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.deleteNamespace(b, name) })
	}
	return r.watch(b, ctx, names...)
}

// scriptedPod is the Pod of a scripted member: fleetd's own image has a
// shell, and its init container brings the scripted agent into every
// member Pod anyway, so the worker image's agent CLIs (730 MiB, 90 s to
// load into the nodes) would sit unused. A scripted agent holds about 41
// MiB and little CPU: the default requests, sized for a real CLI, would
// fit 60 members on 3 nodes of 2 cores, not 150.
func scriptedPod() *fleetv1alpha1.MemberPod {
	return &fleetv1alpha1.MemberPod{Image: "fleetd:dev", Resources: &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("64Mi"),
		},
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi"), corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")},
	}}
}

// watch follows the Members, Delegations and Pods of namespaces in a
// cache, as a controller would: waiting on them costs the API server no
// polls.
func (r *scaleRun) watch(b testing.TB, ctx context.Context, namespaces ...string) cache.Cache {
	b.Helper()
	opts := cache.Options{Scheme: r.c.Scheme(), DefaultNamespaces: map[string]cache.Config{}}
	for _, ns := range namespaces {
		opts.DefaultNamespaces[ns] = cache.Config{}
	}
	v, err := cache.New(r.cfg, opts)
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = v.Start(ctx) }()
	for _, obj := range []client.Object{&fleetv1alpha1.Member{}, &fleetv1alpha1.Delegation{}, &corev1.Pod{}} {
		if _, err := v.GetInformer(ctx, obj); err != nil {
			b.Fatal(err)
		}
	}
	if !v.WaitForCacheSync(ctx) {
		b.Fatal("the watch of members, delegations and pods did not sync")
	}
	return v
}

// createAll creates objs, scaleWorkers at once, and returns when each was
// created.
func (r *scaleRun) createAll(b testing.TB, objs []client.Object) []time.Time {
	b.Helper()
	created := make([]time.Time, len(objs))
	errs := make([]error, len(objs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range scaleWorkers {
		wg.Go(func() {
			for i := range next {
				if err := r.c.Create(context.Background(), objs[i]); err != nil {
					errs[i] = fmt.Errorf("creating %s: %w", objs[i].GetName(), err)
					continue
				}
				created[i] = time.Now()
			}
		})
	}
	for i := range objs {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	return created
}

// startedMembers is what starting a batch of members took.
type startedMembers struct {
	// ready is from the first create to all Ready at once.
	ready time.Duration
	// podsReady is from the first create to all their Pods Ready: what
	// Kubernetes takes, before fleetd starts the panes.
	podsReady time.Duration
	// latencies are each member's own, from its create to its first Ready.
	latencies []time.Duration
}

// startMembers creates scripted members named names in ns and waits until
// all are Ready at once.
func (r *scaleRun) startMembers(b testing.TB, v cache.Cache, ns string, names []string) startedMembers {
	b.Helper()
	// Only a Profile may name a member's image (scriptedPod).
	p := testutil.MakeProfile("scale", ns).Command("scripted-agent", "--received-log", receivedLog).Obj()
	p.Spec.Pod = scriptedPod()
	if err := r.c.Create(context.Background(), p); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	objs := make([]client.Object, len(names))
	for i, name := range names {
		objs[i] = testutil.MakeMember(name, ns).Profile("scale").Obj()
	}
	var out startedMembers
	start := time.Now()
	created := r.createAll(b, objs)
	readyAt := map[string]time.Time{}
	deadline := time.Now().Add(15 * time.Minute)
	for {
		var list fleetv1alpha1.MemberList
		if err := v.List(context.Background(), &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		if out.podsReady == 0 && r.podsReady(b, v, ns) == len(names) {
			out.podsReady = now.Sub(start)
		}
		all := len(list.Items) == len(names)
		var waiting []string
		for i := range list.Items {
			m := &list.Items[i]
			if memberReady(m) {
				if _, ok := readyAt[m.Name]; !ok {
					readyAt[m.Name] = now
				}
				continue
			}
			all = false
			if len(waiting) < 10 {
				waiting = append(waiting, fmt.Sprintf("%s: %s", m.Name, memberWhy(m)))
			}
		}
		if all {
			out.ready = now.Sub(start)
			out.podsReady = cmp.Or(out.podsReady, out.ready)
			for i, name := range names {
				out.latencies = append(out.latencies, readyAt[name].Sub(created[i]))
			}
			return out
		}
		if now.After(deadline) {
			b.Fatalf("%d of %d members Ready after %s; not Ready (first 10):\n%s\n%s",
				len(readyAt), len(names), now.Sub(start).Round(time.Second), strings.Join(waiting, "\n"), diagnose(r.cl))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// podsReady counts the member Pods of ns that are Ready.
func (r *scaleRun) podsReady(b testing.TB, v cache.Cache, ns string) int {
	b.Helper()
	var pods corev1.PodList
	if err := v.List(context.Background(), &pods, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				n++
			}
		}
	}
	return n
}

func memberReady(m *fleetv1alpha1.Member) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady) && m.Status.PaneID != "" && m.Status.PodUID != ""
}

func memberWhy(m *fleetv1alpha1.Member) string {
	if c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionReady); c != nil {
		return fmt.Sprintf("%s (%s: %s)", m.Status.Phase, c.Reason, c.Message)
	}
	return fmt.Sprintf("%s (no Ready condition)", m.Status.Phase)
}

// sentDelegations is what one batch of Delegations took.
type sentDelegations struct {
	n       int
	elapsed time.Duration
	// latencies are each Delegation's own, from its create to its settle.
	latencies []time.Duration
	// requests are the API server's, all callers, while they ran.
	requests requestCounts
	// opens are the TCP connections fleetd's Pod opened meanwhile.
	opens tcpOpens
	// prompts are the prompts sent to each member, by member name.
	prompts map[string][]string
	// problems are the Delegations that did not end Replied with their
	// own reply.
	problems []string
}

func (s sentDelegations) throughput() float64 { return float64(s.n) / s.elapsed.Seconds() }

// sendDelegations creates n detached Delegations numbered first to
// first+n-1, number k to member k mod len(members) with the prompt
// "reply: k", as the cluster admin, and waits until all are settled. Each
// must end Replied with the reply k. It counts the API server's writes
// from before the first create until they stop after the last settle
// (the Members' status as their agents go idle, events): those are the
// Delegations' too.
func (r *scaleRun) sendDelegations(b *testing.B, v cache.Cache, ns string, members []string, first, n int) sentDelegations {
	b.Helper()
	before := r.quiesce(b)
	sent := sentDelegations{n: n, prompts: map[string][]string{}}
	objs := make([]client.Object, n)
	want := map[string]string{}
	for i := range n {
		k := first + i
		to := members[k%len(members)]
		name := fmt.Sprintf("d%04d", k)
		prompt := fmt.Sprintf("reply: %d", k)
		// The admin may name any sender; the one it names is itself, as
		// kubectl would have it. The deadline is far past the run: a slow
		// machine shows as a slow run, not as TimedOut.
		d := testutil.MakeDelegation(name, ns, to, prompt).From(fleetv1alpha1.PrincipalUser, "kubernetes-admin").Detached().Timeout(1800).Obj()
		// The receiver's label, as bridge_send sets it: when the gateway's
		// cache has not caught up with a delivery by the time the worker
		// replies, the gateway finds the Delegation on the API server by
		// this label. A Delegation without it (kubectl's) is then refused
		// (not_found) and settles TurnDone.
		d.Labels = map[string]string{fleetv1alpha1.LabelMember: to}
		objs[i] = d
		sent.prompts[to] = append(sent.prompts[to], prompt)
		want[name] = strconv.Itoa(k)
	}
	opened := r.fleetd(b).opens
	start := time.Now()
	created := r.createAll(b, objs)
	settledAt := map[string]time.Time{}
	deadline := time.Now().Add(15 * time.Minute)
	for {
		var list fleetv1alpha1.DelegationList
		if err := v.List(context.Background(), &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		settled, phases := 0, map[fleetv1alpha1.DelegationPhase]int{}
		for i := range list.Items {
			d := &list.Items[i]
			if _, ours := want[d.Name]; !ours {
				continue
			}
			phases[d.Status.Phase]++
			if delegation.Settled(d.Status.Phase) {
				settled++
				if _, ok := settledAt[d.Name]; !ok {
					settledAt[d.Name] = now
				}
			}
		}
		if settled == n {
			sent.elapsed = now.Sub(start)
			for i, d := range objs {
				sent.latencies = append(sent.latencies, settledAt[d.GetName()].Sub(created[i]))
			}
			break
		}
		if now.After(deadline) {
			b.Fatalf("%d of %d delegations settled after %s: %v\n%s", settled, n, now.Sub(start).Round(time.Second), phases, diagnose(r.cl))
		}
		time.Sleep(100 * time.Millisecond)
	}
	sent.requests = r.quiesce(b).minus(before)
	sent.requests.delegations = n
	sent.opens = r.fleetd(b).opens.minus(opened)

	var list fleetv1alpha1.DelegationList
	if err := v.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	for _, d := range list.Items {
		reply, ours := want[d.Name]
		if !ours {
			continue
		}
		if d.Status.Phase != fleetv1alpha1.DelegationReplied || d.Status.Reply == nil || *d.Status.Reply != reply {
			sent.problems = append(sent.problems, fmt.Sprintf("%s/%s to %s: phase %s, reply %q, want Replied %q: %s",
				ns, d.Name, d.Spec.To, d.Status.Phase, ptrString(d.Status.Reply), reply, lastLine(ptrString(d.Status.Tail))))
		}
	}
	return sent
}

// lastLine is the last line of s that says something: what a turn that
// ended without a reply printed last.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "scripted-agent>") && !strings.HasPrefix(l, "[turn") {
			return l
		}
	}
	return ""
}

func ptrString(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

// checkReceived says where a member's agent did not receive each of its
// prompts exactly once, or received another. The received log is read on
// the node's disk, in the Pod's workspace emptyDir.
func (r *scaleRun) checkReceived(b *testing.B, v cache.Cache, ns string, members []string, prompts map[string][]string) []string {
	b.Helper()
	var bad []string
	for _, name := range members {
		m := r.member(b, v, ns, name)
		node, err := r.cl.Node(m.Status.NodeName)
		if err != nil {
			b.Fatalf("member %s: %v", name, err)
		}
		log := filepath.Join(node.Dir, "kubelet", "pods", m.Status.PodUID, "volumes", "kubernetes.io~empty-dir", "workspace", filepath.Base(receivedLog))
		got, err := testutil.ReadReceived(log)
		if err != nil {
			b.Fatalf("member %s: %v", name, err)
		}
		count := map[string]int{}
		for _, text := range got {
			count[text]++
		}
		for _, text := range prompts[name] {
			if count[text] != 1 {
				bad = append(bad, fmt.Sprintf("%s/%s received %q %d times", ns, name, text, count[text]))
			}
			delete(count, text)
		}
		for text, n := range count {
			bad = append(bad, fmt.Sprintf("%s/%s received %q %d times, never sent to it", ns, name, text, n))
		}
	}
	return bad
}

func (r *scaleRun) member(b testing.TB, v cache.Cache, ns, name string) *fleetv1alpha1.Member {
	b.Helper()
	m := &fleetv1alpha1.Member{}
	if err := v.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		b.Fatal(err)
	}
	if m.Status.PodUID == "" || m.Status.NodeName == "" {
		b.Fatalf("member %s has no pod: %s", name, memberWhy(m))
	}
	return m
}

// deleteNamespace deletes ns and waits until it is gone: fleetd closes
// its members and their Pods go.
func (r *scaleRun) deleteNamespace(b testing.TB, ns string) {
	b.Helper()
	if out, err := kubectlErr(r.cl, "delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=10m"); err != nil {
		b.Logf("deleting namespace %s: %v\n%s", ns, err, out)
	}
}

// percentile is the p-th of ds, sorted in place.
func percentile(ds []time.Duration, p float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}
