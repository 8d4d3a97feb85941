package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/test/framework/stubmodel"
)

// The warm start run's size.
const (
	// warmScripted scripted members start cold, and as many from a pool
	// of that size.
	warmScripted = 20
	// warmClaude members of the real Claude Code start cold, and as many
	// from a pool of that size.
	warmClaude = 4
	// warmRate is how many members are created a second.
	warmRate = 10
)

// BenchmarkWarmStart deploys fleetd with config/default on the 3-node test
// cluster and measures, in one run, kubectl apply of a Member to Ready
// (from its create to the watch seeing it Ready) for members that start a
// Pod of their own against members of a Profile whose warm pool has a Pod
// free for each, created 10 a second:
//
//   - 20 scripted members each way;
//   - 4 members of the real Claude Code each way, against the stand-in
//     model, where the worker image's CLIs were installed (make agents).
//
// The pool's agents are started before its members are created, and the
// cold members start once the pool has refilled. It fails if a member of
// the pool did not claim a warm Pod, or one without a pool did. It takes
// about 5 minutes on a 2-core machine, 2 more to load the worker image.
func BenchmarkWarmStart(b *testing.B) {
	requireCluster(b)
	cl := up(b)
	claude := haveAgents()
	images := "fleetd"
	if claude {
		images += ",worker"
	} else {
		b.Log("no agent CLIs in bin/agents (make agents): the real Claude Code is left out")
	}
	loadImages(b, images)
	deployFleetd(b, cl)
	r := newScaleRun(b, cl)
	round := 0
	for b.Loop() {
		round++
		r.warmRound(b, round, claude)
	}
}

// haveAgents says whether the worker image can carry the real CLIs.
func haveAgents() bool {
	_, err := os.Stat(filepath.Join(testenv.RepoRoot(), "bin", "agents", "node_modules", ".bin", "claude"))
	return err == nil
}

func (r *scaleRun) warmRound(b *testing.B, n int, claude bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := fmt.Sprintf("warm-%d", n)
	v := r.namespaces(b, ctx, ns)
	ready := readyTimes(b, ctx, v)

	var figures []string
	report := func(v float64, unit string) {
		b.ReportMetric(v, unit)
		figures = append(figures, fmt.Sprintf("%.4g %s", v, unit))
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	compare := func(kind string, cold, warm []time.Duration) {
		report(ms(percentile(cold, 0.50)), "ms-"+kind+"-cold-p50")
		report(ms(percentile(cold, 0.99)), "ms-"+kind+"-cold-p99")
		report(ms(percentile(warm, 0.50)), "ms-"+kind+"-warm-p50")
		report(ms(percentile(warm, 0.99)), "ms-"+kind+"-warm-p99")
		report(float64(percentile(warm, 0.50))/float64(percentile(cold, 0.50)), kind+"-warm/cold-p50")
	}

	scripted := func(name string, pool int32) *fleetv1alpha1.Profile {
		p := testutil.MakeProfile(name, ns).Command("scripted-agent").Obj()
		p.Spec.Runtime, p.Spec.Pod = fleetv1alpha1.RuntimePod, scriptedPod()
		if pool > 0 {
			p.Spec.WarmPool = &fleetv1alpha1.WarmPool{Size: pool}
		}
		return p
	}
	r.createProfiles(b, scripted("scripted-warm", warmScripted), scripted("scripted-cold", 0))
	r.waitPoolFree(b, ns, "scripted-warm", warmScripted)
	warm := r.applyAtRate(b, ns, "scripted-warm", "sw", warmScripted, ready)
	// The cold ones start with the pool full again, not beside its refill.
	r.waitPoolFree(b, ns, "scripted-warm", warmScripted)
	cold := r.applyAtRate(b, ns, "scripted-cold", "sc", warmScripted, ready)
	compare("scripted", cold, warm)

	if claude {
		model, err := stubmodel.New(filepath.Join(b.TempDir(), "model-requests.jsonl"))
		if err != nil {
			b.Fatal(err)
		}
		ln, host, err := r.cl.Listen()
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: model}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		key := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "model-key", Namespace: ns, Labels: map[string]string{fleetv1alpha1.LabelAllowMemberEnv: "true"}},
			StringData: map[string]string{"key": "sk-bench-0123456789abcdefghijklmnop"},
		}
		if err := r.c.Create(ctx, key); err != nil {
			b.Fatal(err)
		}
		r.createProfiles(b, claudeProfile(ns, "claude-warm", host, warmClaude), claudeProfile(ns, "claude-cold", host, 0))
		r.waitPoolFree(b, ns, "claude-warm", warmClaude)
		warm := r.applyAtRate(b, ns, "claude-warm", "cw", warmClaude, ready)
		r.waitPoolFree(b, ns, "claude-warm", warmClaude)
		cold := r.applyAtRate(b, ns, "claude-cold", "cc", warmClaude, ready)
		compare("claude", cold, warm)
	}
	b.Logf("warm start round %d: %s", n, strings.Join(figures, ", "))
}

// claudeProfile runs the real Claude Code against the stand-in model at
// host, billed through the API with the key in Secret model-key, with a
// warm pool of pool (none for 0).
func claudeProfile(ns, name, host string, pool int32) *fleetv1alpha1.Profile {
	p := testutil.MakeProfile(name, ns).Obj()
	p.Spec.Agent, p.Spec.Billing, p.Spec.Runtime = fleetv1alpha1.AgentClaude, fleetv1alpha1.BillingAPI, fleetv1alpha1.RuntimePod
	p.Spec.Env = []fleetv1alpha1.EnvVar{
		{Name: "ANTHROPIC_BASE_URL", Value: ptrTo("http://" + host)},
		{Name: "ANTHROPIC_API_KEY", ValueFrom: &fleetv1alpha1.EnvVarSource{SecretKeyRef: corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "model-key"}, Key: "key",
		}}},
	}
	hostname, port, _ := strings.Cut(host, ":")
	p.Spec.Pod = &fleetv1alpha1.MemberPod{Egress: egressTo(hostname, port)}
	if pool > 0 {
		p.Spec.WarmPool = &fleetv1alpha1.WarmPool{Size: pool}
	}
	return p
}

func (r *scaleRun) createProfiles(b *testing.B, profiles ...*fleetv1alpha1.Profile) {
	b.Helper()
	for _, p := range profiles {
		if err := r.c.Create(context.Background(), p); err != nil {
			b.Fatalf("creating profile %s: %v", p.Name, err)
		}
	}
}

// waitPoolFree waits until profile's warm pool has free Pods ready, each
// with its agent started and ready (what free counts).
func (r *scaleRun) waitPoolFree(b *testing.B, ns, profile string, free int32) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var p fleetv1alpha1.Profile
		if err := r.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: profile}, &p); err != nil {
			b.Fatal(err)
		}
		if p.Status.WarmPool != nil && p.Status.WarmPool.Free >= free {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("profile %s's warm pool: %+v, want %d free\n%s", profile, p.Status.WarmPool, free, diagnose(r.cl))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readyTimes records when the watch first sees each Member of v Ready.
func readyTimes(b *testing.B, ctx context.Context, v cache.Cache) *readyLog {
	b.Helper()
	l := &readyLog{at: map[string]time.Time{}}
	inf, err := v.GetInformer(ctx, &fleetv1alpha1.Member{})
	if err != nil {
		b.Fatal(err)
	}
	seen := func(obj any) {
		if m, ok := obj.(*fleetv1alpha1.Member); ok && memberReady(m) {
			l.mark(m.Name, time.Now())
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	return l
}

// readyLog is when each member was first seen Ready.
type readyLog struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (l *readyLog) mark(name string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.at[name]; !ok {
		l.at[name] = at
	}
}

func (l *readyLog) get(name string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.at[name]
	return t, ok
}

// applyAtRate creates count members of profile, named prefix and a
// number, warmRate a second, waits until each is Ready, and returns each
// one's create to Ready. A member of a Profile with a warm pool must have
// claimed a warm Pod, and one of a Profile without must not have.
func (r *scaleRun) applyAtRate(b *testing.B, ns, profile, prefix string, count int, ready *readyLog) []time.Duration {
	b.Helper()
	var p fleetv1alpha1.Profile
	if err := r.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: profile}, &p); err != nil {
		b.Fatal(err)
	}
	pooled := p.Spec.WarmPool != nil
	names := make([]string, count)
	created := make([]time.Time, count)
	start := time.Now()
	for i := range names {
		names[i] = fmt.Sprintf("%s%03d", prefix, i)
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / warmRate)))
		if err := r.c.Create(context.Background(), testutil.MakeMember(names[i], ns).Profile(profile).Obj()); err != nil {
			b.Fatal(err)
		}
		created[i] = time.Now()
	}
	out := make([]time.Duration, count)
	deadline := time.Now().Add(10 * time.Minute)
	for i, name := range names {
		for {
			at, ok := ready.get(name)
			if ok {
				out[i] = at.Sub(created[i])
				break
			}
			if time.Now().After(deadline) {
				var m fleetv1alpha1.Member
				_ = r.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &m)
				b.Fatalf("member %s not Ready: %s\n%s", name, memberWhy(&m), diagnose(r.cl))
			}
			time.Sleep(50 * time.Millisecond)
		}
		var m fleetv1alpha1.Member
		if err := r.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &m); err != nil {
			b.Fatal(err)
		}
		if (m.Status.PodPool != "") != pooled {
			b.Errorf("member %s of profile %s runs in pod %s from pool %q", name, profile, m.Status.PodName, m.Status.PodPool)
		}
	}
	return out
}

// egressTo opens a member Pod's egress to host (an IP) on port.
func egressTo(host, port string) *fleetv1alpha1.MemberEgress {
	p := intstr.Parse(port)
	return &fleetv1alpha1.MemberEgress{Rules: []networkingv1.NetworkPolicyEgressRule{{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: host + "/32"}}},
		Ports: []networkingv1.NetworkPolicyPort{{Port: &p}},
	}}}
}
