package cluster

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/shard"
)

// The replicas run's size.
const (
	replicasMembers = 150
	// replicasDelegations go to the members at each replica count, 4 a
	// member.
	replicasDelegations = 600
)

// BenchmarkReplicas deploys config/default on the 3-node test cluster
// with one fleetd replica, then with three, over the same 150 scripted
// members in Pods, and measures at each count, in the same run:
//
//   - Delegations a second, for 600 detached Delegations spread over the
//     members, from the first create to all Replied, and the ratio of
//     three replicas to one;
//   - each replica's fleetd container's resident memory, idle after the
//     members started and after the Delegations (the most of the
//     replicas and their mean), and the ratio of three to one;
//   - the shards each replica holds.
//
// On a 2-core machine the API server and etcd run beside the nodes and
// fleetd, so the throughput at three replicas says what the API server
// allows, not what fleetd's controllers could do: BenchmarkThousandDelegations
// measures that floor. It fails if a Delegation does not end Replied with
// its own reply, or an agent did not receive each of its prompts once.
func BenchmarkReplicas(b *testing.B) {
	requireCluster(b)
	cl := up(b)
	loadImages(b, "fleetd")
	deployFleetd(b, cl)
	run := newScaleRun(b, cl)
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		ns := "replicas"
		v := run.namespaces(b, ctx, ns)
		members := memberNames(replicasMembers)

		run.scaleFleetd(b, 1)
		run.startMembers(b, v, ns, members)
		time.Sleep(scaleSettle)
		idle1 := run.replicaRSS(b)
		one := run.sendDelegations(b, v, ns, members, 0, replicasDelegations)
		time.Sleep(scaleSettle)
		worked1 := run.replicaRSS(b)

		run.scaleFleetd(b, 3)
		time.Sleep(scaleSettle)
		idle3 := run.replicaRSS(b)
		held := run.shardsHeld(b)
		three := run.sendDelegations(b, v, ns, members, replicasDelegations, replicasDelegations)
		time.Sleep(scaleSettle)
		worked3 := run.replicaRSS(b)

		prompts := map[string][]string{}
		problems := append(one.problems, three.problems...)
		for _, sent := range []sentDelegations{one, three} {
			for m, p := range sent.prompts {
				prompts[m] = append(prompts[m], p...)
			}
		}
		problems = append(problems, run.checkReceived(b, v, ns, members, prompts)...)

		mib := func(v float64) float64 { return v / (1 << 20) }
		b.ReportMetric(one.throughput(), "delegations/s-1-replica")
		b.ReportMetric(three.throughput(), "delegations/s-3-replicas")
		b.ReportMetric(three.throughput()/one.throughput(), "throughput-3/1")
		b.ReportMetric(percentile(one.latencies, 0.5).Seconds(), "s-delegation-p50-1-replica")
		b.ReportMetric(percentile(three.latencies, 0.5).Seconds(), "s-delegation-p50-3-replicas")
		b.ReportMetric(mib(idle1.most()), "MiB-replica-idle-1")
		b.ReportMetric(mib(idle3.most()), "MiB-replica-idle-3-most")
		b.ReportMetric(mib(idle3.mean()), "MiB-replica-idle-3-mean")
		b.ReportMetric(mib(worked1.most()), "MiB-replica-worked-1")
		b.ReportMetric(mib(worked3.most()), "MiB-replica-worked-3-most")
		b.ReportMetric(worked3.most()/worked1.most(), "replica-rss-3/1")
		b.Logf("replicas' memory (MiB): 1 idle %v, worked %v; 3 idle %v, worked %v; shards held at 3: %v",
			idle1.mib(), worked1.mib(), idle3.mib(), worked3.mib(), held)
		cancel()
		run.deleteNamespace(b, ns)
		if len(problems) > 0 {
			b.Fatalf("%d problems:\n%s", len(problems), strings.Join(problems[:min(len(problems), 40)], "\n"))
		}
	}
}

// replicasRSS are each fleetd replica's resident memory, in bytes.
type replicasRSS []float64

func (r replicasRSS) most() float64 { return slices.Max(r) }

func (r replicasRSS) mean() float64 {
	var sum float64
	for _, v := range r {
		sum += v
	}
	return sum / float64(len(r))
}

func (r replicasRSS) mib() []string {
	var out []string
	for _, v := range r {
		out = append(out, strconv.FormatFloat(v/(1<<20), 'f', 0, 64))
	}
	return out
}

// replicaRSS reads each fleetd replica's fleetd container's memory.
func (r *scaleRun) replicaRSS(b *testing.B) replicasRSS {
	b.Helper()
	var out replicasRSS
	for _, pids := range r.fleetdPIDs(b) {
		var rss int64
		for _, pid := range pids {
			rss += vmRSS(pid)
		}
		out = append(out, float64(rss))
	}
	return out
}

// scaleFleetd runs n fleetd replicas and waits until each holds a share
// of the shards and every shard is held.
func (r *scaleRun) scaleFleetd(b *testing.B, n int) {
	b.Helper()
	kubectl(b, r.cl, "-n", "fleetd-system", "scale", "deployment/fleetd", "--replicas="+strconv.Itoa(n))
	if out, err := kubectlErr(r.cl, "-n", "fleetd-system", "rollout", "status", "deployment/fleetd", "--timeout=180s"); err != nil {
		b.Fatalf("fleetd did not scale to %d: %v\n%s", n, err, out)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		held := r.shardsHeld(b)
		if _, free := held[""]; len(held) == n && !free {
			total := 0
			for _, c := range held {
				total += c
			}
			if total == shard.DefaultCount {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("shards held after scaling to %d: %v", n, held)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shardsHeld counts the shards each holder's Lease names ("" for none),
// among the running fleetd pods.
func (r *scaleRun) shardsHeld(b *testing.B) map[string]int {
	b.Helper()
	var leases coordinationv1.LeaseList
	if err := r.c.List(context.Background(), &leases, client.InNamespace("fleetd-system"), client.MatchingLabels{fleetv1alpha1.LabelLease: "shard"}); err != nil {
		b.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range leases.Items {
		out[ptr.Deref(l.Spec.HolderIdentity, "")]++
	}
	return out
}
