package controllers

// Benchmarks of the controllers against the same real kube-apiserver, etcd,
// herdr-compatible server and scripted agent as the integration tests. They
// measure latency and API cost; they assert only that what they wait for
// happens (b.Fatal otherwise), never how fast.
//
// Each one runs for a while (agents start, turns settle), so give an explicit
// iteration count. From the module root:
//
//	go test -run '^$' -bench 'BenchmarkMemberReady' -benchtime=3x ./controllers/
//	go test -run '^$' -bench 'BenchmarkReportToStatus' -benchtime=100x ./controllers/
//	go test -run '^$' -bench 'BenchmarkDelegationDelivery' -benchtime=20x ./controllers/
//	go test -run '^$' -bench 'BenchmarkThousandDelegations' -benchtime=1x -timeout 30m ./controllers/
//
// -short skips the heavy ones (50 agents or more per iteration).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// BenchmarkMemberReady measures the time from creating N Members running the
// scripted agent to all of them Ready. Every iteration gets a fresh
// namespace, herdr server and controllers, set up and torn down off the
// clock.
func BenchmarkMemberReady(b *testing.B) {
	for _, n := range []int{1, 50} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			if n > 1 && testing.Short() {
				b.Skip("starts 50 agents per iteration")
			}
			var (
				total  time.Duration
				rounds int
			)
			for b.Loop() {
				b.StopTimer()
				f := startBenchFleet(b)
				ready := converge(b, f.ns, &fleetv1alpha1.Member{}, n, "members Ready", memberReady)
				queues := make([][]client.Object, n)
				for i := range n {
					queues[i] = []client.Object{testutil.MakeMember(fmt.Sprintf("m%02d", i), f.ns).Command(scriptedAgent).Obj()}
				}
				b.StartTimer()

				start := time.Now()
				createQueues(b, queues)
				total += ready.wait(b, 3*time.Minute).Sub(start)
				rounds++

				b.StopTimer()
				if got := len(workspaces(b, f.herdr)); got != n {
					b.Fatalf("%d workspaces for %d members", got, n)
				}
				ready.stop()
				f.close(b)
				b.StartTimer()
			}
			b.ReportMetric(millis(total)/float64(rounds*n), "ms/member-ready")
		})
	}
}

// BenchmarkReportToStatus measures the time from an agent's status report to
// herdr (pane.report_agent) to the Member's status.agentStatus showing it, as
// a watcher of the API sees it. The raw herdr latency, report to a herdr
// subscriber's pane.agent_status_changed, is measured on the same reports as
// the baseline; status/herdr is what the controller path costs on top.
func BenchmarkReportToStatus(b *testing.B) {
	f := startBenchFleet(b)
	create(b, testutil.MakeMember("w1", f.ns).Command(scriptedAgent).Obj())
	m := waitReady(b, f.ns, "w1")
	pane := m.Status.PaneID

	statuses := make(chan observedStatus, 1024)
	watchKind(b, f.ns, &fleetv1alpha1.Member{}, func(o client.Object, at time.Time) {
		if w, ok := o.(*fleetv1alpha1.Member); ok && w.Name == "w1" {
			offer(statuses, observedStatus{string(w.Status.AgentStatus), at})
		}
	})
	herdrSeen := subscribeAgentStatus(b, f.herdr.client(), pane)

	// A source of our own: herdr orders reports per source, so the scripted
	// agent's seq (its wall clock in milliseconds) does not interfere. The
	// label is the scripted agent's, so no report looks like a new agent.
	hc := f.herdr.client()
	base := uint64(time.Now().UnixMilli()) * 1000
	states := []herdr.AgentState{herdr.AgentStateWorking, herdr.AgentStateIdle}
	if m.Status.AgentStatus == fleetv1alpha1.AgentWorking {
		states[0], states[1] = states[1], states[0]
	}
	var (
		herdrTotal, statusTotal time.Duration
		reports                 int
	)
	for b.Loop() {
		state := states[reports%2]
		reports++
		seq := base + uint64(reports)
		drain(herdrSeen)
		drain(statuses)
		start := time.Now()
		err := hc.PaneReportAgent(context.Background(), herdr.PaneReportAgentParams{
			PaneID: pane, Source: "fleetd-bench", Agent: "scripted", State: state, Seq: &seq,
		})
		if err != nil {
			b.Fatalf("reporting %s: %v", state, err)
		}
		herdrTotal += awaitStatus(b, herdrSeen, string(state), "the herdr subscriber").Sub(start)
		statusTotal += awaitStatus(b, statuses, string(state), "member w1's status.agentStatus").Sub(start)
	}
	b.ReportMetric(millis(statusTotal)/float64(reports), "ms/op")
	b.ReportMetric(millis(herdrTotal)/float64(reports), "herdr-ms/op")
	b.ReportMetric(float64(statusTotal)/float64(herdrTotal), "status/herdr")
}

// BenchmarkDelegationDelivery measures the time from creating a Delegation to
// an idle member until the agent receives it (the time its received log
// records). Each iteration lets the previous Delegation settle TurnDone, off
// the clock, so the member is idle again.
func BenchmarkDelegationDelivery(b *testing.B) {
	f := startBenchFleet(b)
	log := filepath.Join(b.TempDir(), "w1.received")
	create(b, testutil.MakeMember("w1", f.ns).Command(scriptedAgent, "--received-log", log).Obj())
	waitReady(b, f.ns, "w1")

	tail := &receivedTail{path: log}
	var latencies []time.Duration
	for b.Loop() {
		i := len(latencies)
		name, content := fmt.Sprintf("d%04d", i), fmt.Sprintf("silent: delivery %d", i)
		d := testutil.MakeDelegation(name, f.ns, "w1", content).Obj()
		start := time.Now()
		create(b, d)
		latencies = append(latencies, tail.await(b, content, time.Minute).Sub(start))

		b.StopTimer()
		waitPhase(b, f.ns, name, fleetv1alpha1.DelegationTurnDone)
		b.StartTimer()
	}
	slices.Sort(latencies)
	b.ReportMetric(millis(percentile(latencies, 0.50)), "p50-ms")
	b.ReportMetric(millis(percentile(latencies, 0.99)), "p99-ms")
}

// BenchmarkThousandDelegations sends 1,000 Delegations to 50 members, 20 to
// each, created concurrently (in order per member), and measures the time
// until all of them settled and the API writes the controllers made per
// Delegation (the sender's create comes on top: it is not the
// controllers'). One iteration takes about a minute; run it with -benchtime=1x
// (and a -timeout above the default 10m when other benchmarks run with it).
//
// The floor, measured in the same run on the same agents once fleetd's
// controllers are stopped, is what the pane server alone takes for the same
// work, driven as herdr's own client drives it: each member's 20 prompts in
// order, each an agent.prompt that waits until the agent is idle again,
// the members at once. Both end on the same event, the last agent idle
// after its last message; fleetd/floor is the ratio.
//
// The API floor, measured in the same run on the same API server, is what
// the API server alone takes for the writes any durable Delegation needs,
// in the same shape: the 1,000 created at once, then each member's 20 in
// order, each written once as typed and once as settled, the members at
// once (apiFloor). On a machine where the API server's CPU is what runs
// out, fleetd's time cannot go below it; api-floor/floor says how far that
// is from herdr's floor.
func BenchmarkThousandDelegations(b *testing.B) {
	if testing.Short() {
		b.Skip("starts 50 agents and sends 1,000 delegations")
	}
	const members, perMember = 50, 20
	const delegations = members * perMember
	var (
		total, floor, apiFloorTime time.Duration
		writes                     writeTally
		rounds                     int
	)
	for b.Loop() {
		b.StopTimer()
		ns := env.Namespace(b)
		h := startHerdr(b)
		run, counter := startCountingControllers(b, ns, h.socket)
		f := &benchFleet{ns: ns, herdr: h, run: run}

		dir := b.TempDir()
		logs := make([]string, members)
		memberQueues := make([][]client.Object, members)
		for i := range members {
			name := fmt.Sprintf("m%02d", i)
			logs[i] = filepath.Join(dir, name+".received")
			memberQueues[i] = []client.Object{testutil.MakeMember(name, ns).Command(scriptedAgent, "--received-log", logs[i]).Obj()}
		}
		ready := converge(b, ns, &fleetv1alpha1.Member{}, members, "members Ready", memberReady)
		createQueues(b, memberQueues)
		ready.wait(b, 5*time.Minute)
		ready.stop()
		// Count only what the Delegations cause, not the members' start.
		counter.quiesce(b, time.Second, time.Minute)
		before := counter.snapshot()

		want := make([][]string, members)
		queues := make([][]client.Object, members)
		for i := range members {
			for j := range perMember {
				content := fmt.Sprintf("silent: m%02d message %02d", i, j)
				want[i] = append(want[i], content)
				d := testutil.MakeDelegation(fmt.Sprintf("m%02d-d%02d", i, j), ns, fmt.Sprintf("m%02d", i), content).Obj()
				queues[i] = append(queues[i], sequenced(d, j))
			}
		}
		settled := converge(b, ns, &fleetv1alpha1.Delegation{}, delegations, "delegations settled", delegationSettled)
		b.StartTimer()

		start := time.Now()
		createQueues(b, queues)
		total += settled.wait(b, 15*time.Minute).Sub(start)
		rounds++

		b.StopTimer()
		// Writes that trail the last settle (the Members' status as their
		// agents go idle, events) are the Delegations' too.
		counter.quiesce(b, 2*time.Second, time.Minute)
		writes.add(counter.snapshot().minus(before))
		settled.stop()
		tail := checkThousand(b, ns, logs, want)

		f.run.stop()
		panes, prompts := make([]string, members), make([][]string, members)
		for i := range members {
			panes[i] = waitReady(b, ns, fmt.Sprintf("m%02d", i)).Status.PaneID
			for j := range perMember {
				content := fmt.Sprintf("silent: m%02d floor %02d", i, j)
				prompts[i] = append(prompts[i], content)
				want[i] = append(want[i], content)
			}
		}
		floor += promptFloor(b, h.client(), panes, prompts)
		checkReceived(b, logs, want)
		apiFloorTime += apiFloor(b, ns, members, perMember, tail)
		f.close(b)
		b.StartTimer()
	}
	n := float64(rounds * delegations)
	b.ReportMetric(total.Seconds()/float64(rounds), "s/total")
	b.ReportMetric(floor.Seconds()/float64(rounds), "floor-s/total")
	b.ReportMetric(float64(total)/float64(floor), "fleetd/floor")
	b.ReportMetric(apiFloorTime.Seconds()/float64(rounds), "api-floor-s/total")
	b.ReportMetric(float64(apiFloorTime)/float64(floor), "api-floor/floor")
	b.ReportMetric(float64(total)/float64(apiFloorTime), "fleetd/api-floor")
	b.ReportMetric(n/total.Seconds(), "delegations/s")
	b.ReportMetric(float64(writes.total())/n, "writes/delegation")
	b.ReportMetric(float64(writes.matching("delegations"))/n, "delegation-writes/delegation")
	b.ReportMetric(float64(writes.matching("members"))/n, "member-writes/delegation")
	b.ReportMetric(float64(writes.matching("events"))/n, "event-writes/delegation")
	b.ReportMetric(float64(writes.conflicts)/n, "conflicts/delegation")
	b.Logf("API writes for %d delegations in %d round(s):\n%s", delegations, rounds, writes)
}

// checkThousand fails the benchmark unless every Delegation settled TurnDone
// and every agent received its own messages, each once, in order. It
// returns the longest tail a settle carried.
func checkThousand(b *testing.B, ns string, logs []string, want [][]string) string {
	b.Helper()
	var list fleetv1alpha1.DelegationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	phases := map[fleetv1alpha1.DelegationPhase]int{}
	tail := ""
	for _, d := range list.Items {
		phases[d.Status.Phase]++
		if d.Status.Tail != nil && len(*d.Status.Tail) > len(tail) {
			tail = *d.Status.Tail
		}
	}
	if phases[fleetv1alpha1.DelegationTurnDone] != len(list.Items) {
		b.Fatalf("phases of %d delegations: %v, want all %s", len(list.Items), phases, fleetv1alpha1.DelegationTurnDone)
	}
	checkReceived(b, logs, want)
	return tail
}

// apiFloor makes, with no controller running, the API writes any durable
// Delegation needs, as many and in the same shape as the fleetd run: one
// Delegation per message of each member (perMember each), all created at
// once, then each member's in order, each written as typed (its intent,
// before it may be typed) and as settled (with tail), the members at once.
// It returns the time from the first create to the last settle.
func apiFloor(b *testing.B, ns string, members, perMember int, tail string) time.Duration {
	b.Helper()
	queues := make([][]*fleetv1alpha1.Delegation, members)
	objs := make([][]client.Object, members)
	for i := range members {
		for j := range perMember {
			d := testutil.MakeDelegation(fmt.Sprintf("m%02d-api%02d", i, j), ns, fmt.Sprintf("m%02d", i), fmt.Sprintf("silent: m%02d api %02d", i, j)).Obj()
			queues[i] = append(queues[i], sequenced(d, j))
			objs[i] = append(objs[i], queues[i][j])
		}
	}
	ctx := context.Background()
	start := time.Now()
	createQueues(b, objs)
	eachAtOnce(b, members, func(i int) error {
		for _, d := range queues[i] {
			delegation.BeginDelivery(d, time.Now(), delegation.Target{PaneID: fmt.Sprintf("w%d:p1", i), TerminalID: "term", Seq: 1})
			err := env.Client.Status().Update(ctx, d)
			if err == nil {
				delegation.TurnDone(d, time.Now(), tail)
				err = env.Client.Status().Update(ctx, d)
			}
			if err != nil {
				return fmt.Errorf("writing %s: %w", d.Name, err)
			}
		}
		return nil
	})
	return time.Since(start)
}

// checkReceived fails the benchmark unless every agent received its own
// messages, each once, in order.
func checkReceived(b *testing.B, logs []string, want [][]string) {
	b.Helper()
	for i, log := range logs {
		if got := received(b, log); !slices.Equal(got, want[i]) {
			b.Fatalf("member %d received (in order):\n%s\nwant:\n%s", i, strings.Join(got, "\n"), strings.Join(want[i], "\n"))
		}
	}
}

// promptFloor drives the agents of panes through the pane server alone, as
// herdr's own client would: each pane's prompts in order, each typed and
// submitted in one pane.send_input (these agents are plain commands, which
// herdr's agent.prompt does not take), then waited on until herdr reports
// the agent working and then idle (or done) again, the panes at once. It
// returns the time until the last agent was idle after its last prompt.
func promptFloor(b *testing.B, hc *herdr.Client, panes []string, prompts [][]string) time.Duration {
	b.Helper()
	statuses := make([]<-chan observedStatus, len(panes))
	for i, pane := range panes {
		statuses[i] = subscribeAgentStatus(b, hc, pane)
	}
	start := time.Now()
	eachAtOnce(b, len(panes), func(i int) error {
		for _, text := range prompts[i] {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := hc.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: panes[i], Text: text, Keys: []string{"enter"}})
			cancel()
			if err == nil {
				err = awaitTurn(statuses[i], time.Minute)
			}
			if err != nil {
				return fmt.Errorf("prompting pane %s with %q: %w", panes[i], text, err)
			}
		}
		return nil
	})
	return time.Since(start)
}

// awaitTurn returns once seen shows a turn: working, then idle or done.
func awaitTurn(seen <-chan observedStatus, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	working := false
	for {
		select {
		case o := <-seen:
			switch o.status {
			case string(herdr.AgentStatusWorking):
				working = true
			case string(herdr.AgentStatusIdle), string(herdr.AgentStatusDone):
				if working {
					return nil
				}
			}
		case <-timer.C:
			return fmt.Errorf("no turn within %s (working seen: %v)", timeout, working)
		}
	}
}

// benchFleet is one namespace with a herdr server and controllers of its own,
// torn down by close so that a benchmark can build one per iteration.
type benchFleet struct {
	ns    string
	herdr *herdrServer
	run   *controllerRun
}

func startBenchFleet(b *testing.B) *benchFleet {
	b.Helper()
	ns := env.Namespace(b)
	h := startHerdr(b)
	return &benchFleet{ns: ns, herdr: h, run: startControllers(b, ns, h.socket)}
}

// close stops the controllers before herdr, so they do not spend the
// teardown noticing that herdr went away, then deletes the namespace. The
// cleanups startHerdr, startControllers and env.Namespace registered run
// again when the benchmark ends and find nothing left to do.
func (f *benchFleet) close(b *testing.B) {
	b.Helper()
	f.run.stop()
	f.herdr.stop()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}
	if err := env.Client.Delete(context.Background(), ns); client.IgnoreNotFound(err) != nil {
		b.Errorf("deleting namespace %s: %v", f.ns, err)
	}
}

// createQueues creates the objects of every queue, the queues concurrently
// and each queue's objects in order, and fails the benchmark if a create
// fails. It never calls b.Fatal off the benchmark's goroutine.
func createQueues(b *testing.B, queues [][]client.Object) {
	b.Helper()
	eachAtOnce(b, len(queues), func(i int) error {
		for _, obj := range queues[i] {
			if err := env.Client.Create(context.Background(), obj); err != nil {
				return fmt.Errorf("creating %s: %w", obj.GetName(), err)
			}
		}
		return nil
	})
}

// eachAtOnce runs work(i) for every i below n at once and, once all of
// them returned, fails the benchmark with an error one of them returned.
// It never calls b.Fatal off the benchmark's goroutine.
func eachAtOnce(b *testing.B, n int, work func(i int) error) {
	b.Helper()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := work(i); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// watchKind hands every add and update of obj's kind in ns, stamped with
// when it arrived, to seen. It runs an informer of its own (the view any API
// client gets, not the controllers' cache) until the returned stop is called
// or the benchmark ends. seen is called from one goroutine, in order.
func watchKind(b *testing.B, ns string, obj client.Object, seen func(o client.Object, at time.Time)) (stop func()) {
	b.Helper()
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Start(ctx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	b.Cleanup(stop)
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		b.Fatal(err)
	}
	handle := func(o any) {
		if co, ok := o.(client.Object); ok {
			seen(co, time.Now())
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { handle(o) },
		UpdateFunc: func(_, o any) { handle(o) },
	})
	if err != nil {
		b.Fatal(err)
	}
	if !c.WaitForCacheSync(ctx) {
		b.Fatalf("the informer for %T did not sync", obj)
	}
	return stop
}

// convergence follows the objects of one kind and says when want of them
// satisfy a predicate at the same time.
type convergence struct {
	what string
	want int
	stop func()

	mu     sync.Mutex
	holds  map[string]bool
	states map[string]string
	at     time.Time
	done   chan struct{}
}

// converge starts following the objects of obj's kind in ns. pred says
// whether an object counts, and describes its state for a failure message.
func converge(b *testing.B, ns string, obj client.Object, want int, what string, pred func(client.Object) (bool, string)) *convergence {
	b.Helper()
	c := &convergence{what: what, want: want, holds: map[string]bool{}, states: map[string]string{}, done: make(chan struct{})}
	c.stop = watchKind(b, ns, obj, func(o client.Object, at time.Time) {
		ok, state := pred(o)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.holds[o.GetName()], c.states[o.GetName()] = ok, state
		if c.at.IsZero() && c.countLocked() >= c.want {
			c.at = at
			close(c.done)
		}
	})
	return c
}

func (c *convergence) countLocked() int {
	n := 0
	for _, ok := range c.holds {
		if ok {
			n++
		}
	}
	return n
}

// wait returns when the objects converged, or fails the benchmark after
// timeout with a summary of where they are.
func (c *convergence) wait(b *testing.B, timeout time.Duration) time.Time {
	b.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.at
	case <-timer.C:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pending := map[string]int{}
	for name, ok := range c.holds {
		if !ok {
			pending[c.states[name]]++
		}
	}
	b.Fatalf("timed out after %s waiting for %d %s: %d of %d seen do; the others: %v",
		timeout, c.want, c.what, c.countLocked(), len(c.holds), pending)
	return time.Time{}
}

func memberReady(o client.Object) (bool, string) {
	m := o.(*fleetv1alpha1.Member)
	ready := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionReady)
	if ready == nil {
		return false, string(m.Status.Phase) + " (no Ready condition)"
	}
	return ready.Status == metav1.ConditionTrue && m.Status.PaneID != "", fmt.Sprintf("%s (%s)", m.Status.Phase, ready.Reason)
}

func delegationSettled(o client.Object) (bool, string) {
	d := o.(*fleetv1alpha1.Delegation)
	return delegation.Settled(d.Status.Phase), string(d.Status.Phase)
}

// observedStatus is an agent status someone saw, and when.
type observedStatus struct {
	status string
	at     time.Time
}

// subscribeAgentStatus follows herdr's pane.agent_status_changed for pane,
// stamping each event when it arrives. It returns once the subscription is
// live.
func subscribeAgentStatus(b *testing.B, hc *herdr.Client, pane string) <-chan observedStatus {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream := hc.Subscribe(ctx, []herdr.Subscription{herdr.PaneAgentStatusChanged(pane)})
	b.Cleanup(func() {
		cancel()
		_ = stream.Close()
	})
	seen := make(chan observedStatus, 1024)
	live := make(chan struct{})
	go func() {
		synced := false
		for ev := range stream.Events() {
			switch {
			case ev.Kind == herdr.EventResync && !synced:
				synced = true
				close(live)
			case ev.Kind == herdr.EventPaneAgentStatusChanged:
				offer(seen, observedStatus{string(ev.Data.AgentStatus), time.Now()})
			}
		}
	}()
	select {
	case <-live:
	case <-time.After(30 * time.Second):
		b.Fatalf("no resync on the herdr subscription to pane %s: %v", pane, stream.Err())
	}
	return seen
}

// awaitStatus returns when want shows on seen.
func awaitStatus(b *testing.B, seen <-chan observedStatus, want, who string) time.Time {
	b.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	last := "nothing"
	for {
		select {
		case o := <-seen:
			if o.status == want {
				return o.at
			}
			last = o.status
		case <-timer.C:
			b.Fatalf("%s never showed %s; last seen: %s", who, want, last)
		}
	}
}

// offer sends v unless ch is full. The channels are drained every
// iteration, so a full one means a stuck benchmark, which must not also
// block the informer or the stream that feeds it.
func offer[T any](ch chan<- T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// drain drops what an earlier iteration left on ch.
func drain[T any](ch <-chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// receivedTail reads a scripted agent's received log as it grows.
type receivedTail struct {
	path string
	off  int64
}

// await polls the log until its next prompt arrives and returns when the
// agent recorded it. Any other prompt fails the benchmark: nothing else was
// sent, so it would be a duplicate.
func (r *receivedTail) await(b *testing.B, content string, timeout time.Duration) time.Time {
	b.Helper()
	var at time.Time
	testutil.Eventually(b, fmt.Sprintf("the agent to receive %q", content), func() (bool, string) {
		entries, err := r.next()
		if err != nil {
			b.Fatal(err)
		}
		if len(entries) == 0 {
			return false, "nothing received"
		}
		if e := entries[0]; e.Text != content {
			b.Fatalf("the agent received %q while %q was expected", e.Text, content)
		}
		at = entries[0].Time
		return true, ""
	}, testutil.Within(timeout), testutil.Every(time.Millisecond))
	return at
}

// receivedEntry is a line of the scripted agent's received log.
type receivedEntry struct {
	Time time.Time `json:"time"`
	Text string    `json:"text"`
}

// next returns the whole lines written since the last call.
func (r *receivedTail) next() ([]receivedEntry, error) {
	f, err := os.Open(r.path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(r.off, io.SeekStart); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	r.off += int64(len(data))
	var out []receivedEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var e receivedEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("received log %s: %w", r.path, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// startCountingControllers is startControllers with the manager's requests
// going through a writeCounter. It repeats startManager's wiring because
// that takes its rest.Config from env.
func startCountingControllers(b *testing.B, ns, socket string) (*controllerRun, *writeCounter) {
	b.Helper()
	counter := &writeCounter{byKey: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = transport.Wrappers(cfg.WrapTransport, counter.wrap)
	return startManager(b, cfg, ns, socket, true), counter
}

// writeCounter counts the API requests that write (POST, PUT, PATCH,
// DELETE), by verb and resource, and those the server refused with a
// conflict.
type writeCounter struct {
	mu        sync.Mutex
	byKey     map[string]int
	conflicts int
	last      time.Time
}

func (c *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return &countingTransport{next: rt, counter: c}
}

type countingTransport struct {
	next    http.RoundTripper
	counter *writeCounter
}

// RoundTrip counts a write and passes every request on.
func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return t.next.RoundTrip(req)
	}
	resp, err := t.next.RoundTrip(req)
	c := t.counter
	c.mu.Lock()
	c.byKey[req.Method+" "+resourceOf(req.URL.Path)]++
	if resp != nil && resp.StatusCode == http.StatusConflict {
		c.conflicts++
	}
	c.last = time.Now()
	c.mu.Unlock()
	return resp, err
}

// resourceOf turns a namespaced API path into resource[/subresource].
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p != "namespaces" || i+2 >= len(parts) {
			continue
		}
		if i+4 < len(parts) {
			return parts[i+2] + "/" + parts[i+4]
		}
		return parts[i+2]
	}
	return path
}

// quiesce returns once no write was made for quiet, and fails the benchmark
// if the controllers keep writing for timeout.
func (c *writeCounter) quiesce(b *testing.B, quiet, timeout time.Duration) {
	b.Helper()
	testutil.Eventually(b, fmt.Sprintf("the controllers to make no write for %s, with nothing to do", quiet), func() (bool, string) {
		c.mu.Lock()
		last := c.last
		c.mu.Unlock()
		return time.Since(last) >= quiet, fmt.Sprintf("a write %s ago", time.Since(last).Round(time.Millisecond))
	}, testutil.Within(timeout), testutil.Every(100*time.Millisecond))
}

func (c *writeCounter) snapshot() writeTally {
	c.mu.Lock()
	defer c.mu.Unlock()
	return writeTally{byKey: maps.Clone(c.byKey), conflicts: c.conflicts}
}

// writeTally is a count of writes by "VERB resource[/subresource]".
type writeTally struct {
	byKey     map[string]int
	conflicts int
}

func (t writeTally) minus(before writeTally) writeTally {
	out := writeTally{byKey: map[string]int{}, conflicts: t.conflicts - before.conflicts}
	for k, n := range t.byKey {
		if d := n - before.byKey[k]; d != 0 {
			out.byKey[k] = d
		}
	}
	return out
}

func (t *writeTally) add(o writeTally) {
	if t.byKey == nil {
		t.byKey = map[string]int{}
	}
	for k, n := range o.byKey {
		t.byKey[k] += n
	}
	t.conflicts += o.conflicts
}

func (t writeTally) total() int {
	n := 0
	for _, v := range t.byKey {
		n += v
	}
	return n
}

// matching counts the writes to resource and its subresources.
func (t writeTally) matching(resource string) int {
	n := 0
	for k, v := range t.byKey {
		if _, res, _ := strings.Cut(k, " "); res == resource || strings.HasPrefix(res, resource+"/") {
			n += v
		}
	}
	return n
}

// String lists the writes by key, most first.
func (t writeTally) String() string {
	keys := slices.Collect(maps.Keys(t.byKey))
	slices.SortFunc(keys, func(a, b string) int { return t.byKey[b] - t.byKey[a] })
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "  %6d  %s\n", t.byKey[k], k)
	}
	fmt.Fprintf(&sb, "  %6d  total, of which %d conflicts (409)", t.total(), t.conflicts)
	return sb.String()
}

// percentile is the nearest-rank p-quantile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
