package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/test/framework/localcluster"
)

// The suspend run's size.
const (
	// suspendMembers are suspended at once, and what they then cost is
	// counted.
	suspendMembers = 100
	// suspendCyclers are suspended and resumed suspendCycles times each,
	// suspendCyclers*suspendCycles cycles in all.
	suspendCyclers = 10
	suspendCycles  = 10
	// suspendAfter is their idle policy.
	suspendAfter = "2s"
	// suspendStorageClass names the volumes the run makes by hand: the
	// local cluster has no provisioner.
	suspendStorageClass = "fleetd-bench-manual"
)

// BenchmarkSuspend deploys fleetd with config/default on the 3-node test
// cluster and measures suspend and resume of scripted members in Pods
// with workspace claims (on hostPath volumes the run makes):
//
//   - 100 members with idle.suspendAfter 2s: seconds from the first create
//     to all suspended, and what the 100 then cost: their Pods and their
//     agents' processes on the nodes (both should be 0);
//   - 100 suspend and resume cycles over 10 of them: in each, once the
//     member is suspended, a message resumes it and a second comes while
//     its new Pod starts. Each resume's latency, from the message's
//     create to the member's agent typed into (the Delegation's
//     deliveringAt seen by a watch), against a running member's, from
//     create to typed, measured on the same members before the cycles.
//
// It fails if a message does not end Replied with its own reply, or a
// member's agent (its received log, on its workspace volume, which
// outlives its Pods) did not receive each prompt exactly once, in the
// order sent. It takes about 10 minutes on a 2-core machine.
func BenchmarkSuspend(b *testing.B) {
	requireCluster(b)
	cl := up(b)
	loadImages(b, "fleetd")
	deployFleetd(b, cl)
	r := newScaleRun(b, cl)
	round := 0
	for b.Loop() {
		round++
		r.suspendRound(b, round)
	}
}

func (r *scaleRun) suspendRound(b *testing.B, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	baseNS, ns := fmt.Sprintf("suspend-base-%d", n), fmt.Sprintf("suspend-%d", n)
	v := r.namespaces(b, ctx, baseNS, ns)

	// The baseline: a message to a running member, typed.
	base := memberNames(suspendCyclers)
	r.startMembers(b, v, baseNS, base)
	var running []time.Duration
	for _, name := range base {
		running = append(running, r.typed(b, v, baseNS, name, fmt.Sprintf("reply: %s running", name)))
	}
	// Gone before the others start: their agents are not counted below.
	r.deleteNamespace(b, baseNS)

	// 100 members that are suspended once idle for 2s.
	members := memberNames(suspendMembers)
	dirs := r.workspaceVolumes(b, ns, members)
	r.suspendProfile(b, ns, suspendAfter)
	objs := make([]client.Object, len(members))
	for i, name := range members {
		objs[i] = testutil.MakeMember(name, ns).Profile("scale").Obj()
	}
	start := time.Now()
	r.createAll(b, objs)
	if err := r.waitSuspended(v, ns, members, 15*time.Minute); err != nil {
		b.Fatalf("%v\n%s", err, diagnose(r.cl))
	}
	allSuspended := time.Since(start)
	pods := r.memberPods(b, v, ns)
	agents := agentProcesses(b)

	cyclers := members[:suspendCyclers]
	sent := map[string][]string{}
	var resumes []time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(cyclers))
	for i, name := range cyclers {
		wg.Go(func() {
			for c := range suspendCycles {
				prompt := fmt.Sprintf("reply: %s cycle %d", name, c)
				mid := fmt.Sprintf("reply: %s cycle %d mid-resume", name, c)
				latency, err := r.cycle(v, ns, name, prompt, mid)
				mu.Lock()
				sent[name] = append(sent[name], prompt, mid)
				if err == nil {
					resumes = append(resumes, latency)
				}
				mu.Unlock()
				if err != nil {
					errs[i] = fmt.Errorf("%s, cycle %d: %w", name, c, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatalf("%v\n%s", err, diagnose(r.cl))
	}

	var problems []string
	for _, name := range cyclers {
		got, err := testutil.ReadReceived(filepath.Join(dirs[name], filepath.Base(receivedLog)))
		if err != nil {
			b.Fatal(err)
		}
		if !slices.Equal(got, sent[name]) {
			problems = append(problems, fmt.Sprintf("%s received %q, want %q: each once, in order", name, got, sent[name]))
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	var figures []string
	report := func(v float64, unit string) {
		b.ReportMetric(v, unit)
		figures = append(figures, fmt.Sprintf("%.4g %s", v, unit))
	}
	report(allSuspended.Seconds(), "s-100-suspended")
	report(float64(pods), "pods-100-suspended")
	report(float64(agents), "agents-100-suspended")
	report(float64(len(resumes)), "cycles")
	report(ms(percentile(resumes, 0.50)), "ms-resume-typed-p50")
	report(ms(percentile(resumes, 0.95)), "ms-resume-typed-p95")
	report(ms(percentile(running, 0.50)), "ms-running-typed-p50")
	report(float64(percentile(resumes, 0.50))/float64(percentile(running, 0.50)), "resume/running-p50")
	b.Logf("suspend round %d: %s", n, strings.Join(figures, ", "))
	if pods != 0 || agents != 0 {
		problems = append(problems, fmt.Sprintf("%d suspended members still have %d Pods and %d agent processes", suspendMembers, pods, agents))
	}
	if len(problems) > 0 {
		b.Fatalf("%d problems:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}

// suspendProfile is the members' Profile: the scripted agent, writing its
// received log on a workspace claim, and idle as given ("" for none).
func (r *scaleRun) suspendProfile(b *testing.B, ns, idle string) *fleetv1alpha1.Profile {
	b.Helper()
	p := testutil.MakeProfile("scale", ns).Command("scripted-agent", "--received-log", receivedLog).Obj()
	p.Spec.Pod = scriptedPod()
	p.Spec.Pod.Workspace = &fleetv1alpha1.Workspace{VolumeClaim: &fleetv1alpha1.WorkspaceVolumeClaim{
		Size: resource.MustParse("1Gi"), StorageClassName: ptrTo(suspendStorageClass),
	}}
	if idle != "" {
		p.Spec.Idle = &fleetv1alpha1.MemberIdle{SuspendAfter: duration(b, idle)}
	}
	if err := r.c.Create(context.Background(), p); err != nil {
		b.Fatal(err)
	}
	return p
}

// workspaceVolumes makes a hostPath volume bound to each member's
// workspace claim, in a directory of its own (the nodes share this
// machine's filesystem), and returns the directories by member.
func (r *scaleRun) workspaceVolumes(b *testing.B, ns string, members []string) map[string]string {
	b.Helper()
	root := b.TempDir()
	dirs := map[string]string{}
	for _, name := range members {
		dir := filepath.Join(root, name)
		// The agent runs as a user of its own; a hostPath volume gets no
		// fsGroup.
		if err := os.Mkdir(dir, 0o777); err != nil {
			b.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			b.Fatal(err)
		}
		pv := localcluster.HostPathVolume(ns+"-"+name+"-workspace", ns, name+"-workspace", dir, suspendStorageClass)
		if err := r.c.Create(context.Background(), pv); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = r.c.Delete(context.Background(), pv) })
		dirs[name] = dir
	}
	return dirs
}

// cycle waits for the suspended member name, resumes it with a message
// (prompt), sends another (mid) while it resumes, and waits for both
// replies. It returns how long the first took to be typed.
func (r *scaleRun) cycle(v cache.Cache, ns, name, prompt, mid string) (time.Duration, error) {
	if err := r.waitSuspended(v, ns, []string{name}, 5*time.Minute); err != nil {
		return 0, err
	}
	d, err := r.sendOne(ns, name, prompt)
	if err != nil {
		return 0, err
	}
	if err := r.waitResuming(v, ns, name); err != nil {
		return 0, err
	}
	dm, err := r.sendOne(ns, name, mid)
	if err != nil {
		return 0, err
	}
	latency, err := r.waitTyped(v, d)
	if err != nil {
		return 0, err
	}
	return latency, r.waitReplied(v, d, dm)
}

// waitSuspended waits until every member of names is suspended and has no
// Pod left.
func (r *scaleRun) waitSuspended(v cache.Cache, ns string, names []string, within time.Duration) error {
	want := sets.New(names...)
	deadline := time.Now().Add(within)
	for {
		var list fleetv1alpha1.MemberList
		if err := v.List(context.Background(), &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		podsOf, err := r.podsByMember(v, ns)
		if err != nil {
			return err
		}
		var waiting []string
		found := 0
		for i := range list.Items {
			m := &list.Items[i]
			if !want.Has(m.Name) {
				continue
			}
			found++
			if m.Status.Phase != fleetv1alpha1.MemberSuspended || podsOf[string(m.UID)] > 0 {
				waiting = append(waiting, fmt.Sprintf("%s: %s, %d pods", m.Name, memberWhy(m), podsOf[string(m.UID)]))
			}
		}
		if len(waiting) == 0 && found == len(names) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d members not suspended after %s (first 10):\n%s", len(waiting)+len(names)-found, len(names), within,
				strings.Join(waiting[:min(10, len(waiting))], "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitResuming waits until the member is no longer suspended.
func (r *scaleRun) waitResuming(v cache.Cache, ns, name string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		m := &fleetv1alpha1.Member{}
		if err := v.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
			return err
		}
		if m.Status.SuspendedAt == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("member %s not resuming after 2m: %s", name, memberWhy(m))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// podsByMember counts the Pods of ns by their member's uid.
func (r *scaleRun) podsByMember(v cache.Cache, ns string) (map[string]int, error) {
	var pods corev1.PodList
	if err := v.List(context.Background(), &pods, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	n := map[string]int{}
	for _, p := range pods.Items {
		n[p.Labels[fleetv1alpha1.LabelMemberUID]]++
	}
	return n, nil
}

// memberPods counts the Pods of ns.
func (r *scaleRun) memberPods(b *testing.B, v cache.Cache, ns string) int {
	b.Helper()
	byMember, err := r.podsByMember(v, ns)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, c := range byMember {
		n += c
	}
	return n
}

// agentProcesses counts the scripted agents running in the test
// cluster's Pods, read from each Pod's cgroup.
func agentProcesses(b *testing.B) int {
	b.Helper()
	n := 0
	for _, dir := range podCgroups(b) {
		for _, pid := range cgroupPIDs(dir) {
			cmdline, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
			if err == nil && strings.Contains(string(cmdline), "scripted-agent") {
				n++
			}
		}
	}
	return n
}

// sendOne creates a detached message to member name, as the cluster
// admin, with the receiver's label and the sequence bridge_send sets.
func (r *scaleRun) sendOne(ns, name, prompt string) (*fleetv1alpha1.Delegation, error) {
	d := testutil.MakeDelegation("", ns, name, prompt).From(fleetv1alpha1.PrincipalUser, "kubernetes-admin").Detached().Timeout(1800).Obj()
	d.GenerateName, d.Name = name+"-", ""
	d.Labels = map[string]string{fleetv1alpha1.LabelMember: name}
	// The order within one second, as the gateway stamps it: creation
	// timestamps have whole seconds, and a message and the one sent
	// mid-resume often share one.
	d.Annotations = map[string]string{fleetv1alpha1.AnnotationSequence: time.Now().UTC().Format(time.RFC3339Nano)}
	if err := r.c.Create(context.Background(), d); err != nil {
		return nil, fmt.Errorf("sending %q to %s: %w", prompt, name, err)
	}
	return d, nil
}

// typed sends prompt to a running member and returns how long it took
// to be typed; it waits for the reply.
func (r *scaleRun) typed(b *testing.B, v cache.Cache, ns, name, prompt string) time.Duration {
	b.Helper()
	d, err := r.sendOne(ns, name, prompt)
	if err != nil {
		b.Fatal(err)
	}
	latency, err := r.waitTyped(v, d)
	if err == nil {
		err = r.waitReplied(v, d)
	}
	if err != nil {
		b.Fatalf("%v\n%s", err, diagnose(r.cl))
	}
	return latency
}

// waitTyped waits until the watch shows d being typed, and returns how
// long after d's create that was.
func (r *scaleRun) waitTyped(v cache.Cache, d *fleetv1alpha1.Delegation) (time.Duration, error) {
	created := time.Now()
	deadline := created.Add(5 * time.Minute)
	for {
		cur := &fleetv1alpha1.Delegation{}
		err := v.Get(context.Background(), client.ObjectKeyFromObject(d), cur)
		if err != nil && !apierrors.IsNotFound(err) {
			return 0, err
		}
		if err == nil && (cur.Status.DeliveringAt != nil || cur.Status.DeliveredAt != nil) {
			return time.Since(created), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("message %s not typed after 5m: phase %s", d.Name, cur.Status.Phase)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitReplied waits until each of ds ended Replied with its own reply.
func (r *scaleRun) waitReplied(v cache.Cache, ds ...*fleetv1alpha1.Delegation) error {
	for _, d := range ds {
		want := strings.TrimPrefix(d.Spec.Content, "reply: ")
		deadline := time.Now().Add(5 * time.Minute)
		for {
			cur := &fleetv1alpha1.Delegation{}
			if err := v.Get(context.Background(), client.ObjectKeyFromObject(d), cur); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			if cur.Status.Phase == fleetv1alpha1.DelegationReplied {
				if cur.Status.Reply == nil || *cur.Status.Reply != want {
					return fmt.Errorf("message %s replied %q, want %q", d.Name, ptrString(cur.Status.Reply), want)
				}
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("message %s not replied after 5m: phase %s", d.Name, cur.Status.Phase)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

func duration(b *testing.B, s string) *metav1.Duration {
	b.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		b.Fatal(err)
	}
	return &metav1.Duration{Duration: d}
}

func ptrTo[T any](v T) *T { return &v }
