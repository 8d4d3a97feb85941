package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/internal/testutil"
)

// heldWaiters is how many calls the memory benchmarks hold at once.
const heldWaiters = 10000

// inUse is the memory a process holds for live objects and goroutine
// stacks, after a collection.
func inUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// BenchmarkHeldWaiters measures the gateway's own memory per held call: the
// handler goroutine's stack, the waiter, its timers, and the Delegation
// copy it keeps, with heldWaiters calls held at once. (The HTTP connection
// and the SDK's per-request state come on top; see BenchmarkHeldCalls.)
func BenchmarkHeldWaiters(b *testing.B) {
	g, _ := fakeGateway(b)
	ctx := context.Background()
	seeds := make([]*fleetv1alpha1.Delegation, heldWaiters)
	for i := range seeds {
		d := testutil.MakeDelegation(fmt.Sprintf("held-%d", i), "fuzz", "w1", "a task of a typical length: fix the flaky test in the gateway package").Obj()
		if err := g.client.Create(ctx, d); err != nil {
			b.Fatal(err)
		}
		seeds[i] = d
	}
	c := &call{tool: "bridge_send", who: &identity.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary", Namespace: "fuzz"}}
	never := func(*fleetv1alpha1.Delegation) bool { return false }

	var perHold float64
	for b.Loop() {
		before := inUse()
		hctx, release := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, d := range seeds {
			wg.Go(func() { _, _ = g.hold(hctx, c, d, time.Hour, never) })
		}
		for g.rv.held() < heldWaiters {
			time.Sleep(10 * time.Millisecond)
		}
		// Let every waiter reach its select before measuring.
		time.Sleep(100 * time.Millisecond)
		perHold = float64(inUse()-before) / heldWaiters
		release()
		wg.Wait()
	}
	b.ReportMetric(perHold, "B/hold")
}

// BenchmarkWake measures the rendezvous alone: from an informer event to
// the woken waiter.
func BenchmarkWake(b *testing.B) {
	rv := newRendezvous()
	key := types.NamespacedName{Namespace: "ns", Name: "d"}
	w := rv.subscribe(key)
	for b.Loop() {
		rv.notify(key)
		<-w.wake
	}
}

// BenchmarkRendezvous measures a bridge_send through to the reply of a
// worker that replies as soon as the message is delivered, over HTTP,
// against the real API server. The benchmark plays the controller's
// delivery step, so the figure includes two extra API writes.
func BenchmarkRendezvous(b *testing.B) {
	ns := env.Namespace(b)
	h := startGateway(b, ns, Options{})
	_, workerToken := addMember(b, member("w1", ns).Obj())
	primary := h.connect(b, staticToken, nil)
	worker := h.connect(b, workerToken, nil)

	// The worker: deliver each new Delegation, then reply to it. New ones
	// arrive from an informer of the gateway's manager, as they would reach
	// the controller.
	created := make(chan string, 16)
	inf, err := h.mgr.GetCache().GetInformer(context.Background(), &fleetv1alpha1.Delegation{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		created <- obj.(*fleetv1alpha1.Delegation).Name
	}}); err != nil {
		b.Fatal(err)
	}
	go func() {
		for name := range created {
			deliver(b, ns, name)
			res, err := worker.CallTool(context.Background(), &mcp.CallToolParams{Name: "bridge_reply", Arguments: map[string]any{"content": "ok"}})
			if err != nil || res.IsError {
				b.Errorf("bridge_reply: %v %v", err, res)
			}
		}
	}()

	for b.Loop() {
		res, err := primary.CallTool(context.Background(), &mcp.CallToolParams{Name: "bridge_send", Arguments: map[string]any{"content": "ping"}})
		if err != nil || res.IsError {
			b.Fatalf("bridge_send: %v %v", err, res)
		}
	}
}

// Environment of the load generator BenchmarkHeldCalls runs as a child
// process, so that the client's memory is not counted with the gateway's.
const (
	loadEnvURL   = "FLEETD_GATEWAY_LOAD_URL"
	loadEnvToken = "FLEETD_GATEWAY_LOAD_TOKEN"
	loadEnvCalls = "FLEETD_GATEWAY_LOAD_CALLS"
	// benchEnvHolds overrides heldWaiters for BenchmarkHeldCalls.
	benchEnvHolds = "FLEETD_BENCH_HOLDS"
)

// BenchmarkHeldCalls measures the gateway process's memory per held
// bridge_send end to end: the HTTP connection, the SDK's per-request
// session, the hold, and the Delegation in the informer's cache. A child
// process opens the calls over plain TCP, one connection each.
func BenchmarkHeldCalls(b *testing.B) {
	n := heldWaiters
	if v, err := strconv.Atoi(os.Getenv(benchEnvHolds)); err == nil && v > 0 {
		n = v
	}
	ns := env.Namespace(b)
	h := startGateway(b, ns, Options{})
	addMember(b, member("w1", ns).Obj())
	ctx := context.Background()

	var perHold float64
	for b.Loop() {
		before := inUse()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), loadEnvURL+"="+h.url, loadEnvToken+"="+staticToken, fmt.Sprintf("%s=%d", loadEnvCalls, n))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		release, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		// Wait until the holds stop growing: on a busy machine a few creates
		// may fail, and those calls are not held.
		started, held, grew := time.Now(), 0, time.Now()
		for held < n && time.Since(grew) < 10*time.Second {
			time.Sleep(100 * time.Millisecond)
			if now := h.gw.rv.held(); now > held {
				held, grew = now, time.Now()
			}
		}
		if held < n*9/10 {
			b.Fatalf("only %d of %d calls held", held, n)
		}
		b.Logf("%d of %d calls held after %v", held, n, time.Since(started).Round(time.Millisecond))
		time.Sleep(time.Second)
		perHold = float64(inUse()-before) / float64(held)
		if path := os.Getenv("FLEETD_BENCH_HEAPPROFILE"); path != "" {
			f, _ := os.Create(path)
			_ = pprof.WriteHeapProfile(f)
			_ = f.Close()
			b.Logf("goroutines: %d", runtime.NumGoroutine())
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.Logf("heap %d stack %d", ms.HeapAlloc, ms.StackInuse)
		}

		// Deleting the Delegations ends the holds without a write each.
		if err := env.Client.DeleteAllOf(ctx, &fleetv1alpha1.Delegation{}, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		for h.gw.rv.held() > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		_ = release.Close()
		if err := cmd.Wait(); err != nil {
			b.Fatalf("load generator: %v", err)
		}
	}
	b.ReportMetric(perHold, "B/hold")
}

// generateLoad is the child process of BenchmarkHeldCalls: it opens the
// calls and keeps their connections until its stdin closes. It speaks the
// 2025-06-18 revision, which a stateless server takes without a handshake.
func generateLoad() error {
	base, err := url.Parse(os.Getenv(loadEnvURL))
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(os.Getenv(loadEnvCalls))
	if err != nil {
		return err
	}
	token := os.Getenv(loadEnvToken)
	conns := make([]net.Conn, 0, n)
	for i := range n {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"bridge_send","arguments":{"content":"held call %d","sessionId":"w1","timeoutMs":3600000}}}`, i, i)
		c, err := net.Dial("tcp", base.Host)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		req := "POST /mcp HTTP/1.1\r\nHost: " + base.Host + "\r\nAuthorization: Bearer " + token +
			"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n" +
			fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
		if _, err := io.WriteString(c, req); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		conns = append(conns, c)
		// Pace the calls so that the API server takes the creates without
		// throttling.
		if i%100 == 99 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		_ = c.Close()
	}
	return nil
}

// BenchmarkBridgeListBytes measures what one bridge_list puts on the wire
// (text content and structured content) with 500 members, all of them on
// one page and the default page of 100, against what the
// full member records twice over, bridge_list's old answer, come to for the
// same members. Report the ratio: full-bytes/op over response-bytes/op.
func BenchmarkBridgeListBytes(b *testing.B) {
	const members = 500
	ns := env.Namespace(b)
	h := startGateway(b, ns, Options{})
	ctx := context.Background()
	create(b, testutil.MakeProfile("sonnet", ns).Agent(fleetv1alpha1.AgentClaude).Default().Obj())
	for i := range members {
		m := testutil.MakeMember(fmt.Sprintf("worker-%03d", i), ns).Profile("sonnet").Team(fmt.Sprintf("team-%d", i%20), fleetv1alpha1.RoleMember).Obj()
		m.Annotations = map[string]string{fleetv1alpha1.AnnotationSpawnedBy: "Static:primary"}
		create(b, m)
		m.Status = fleetv1alpha1.MemberStatus{
			Phase: fleetv1alpha1.MemberReady, AgentStatus: fleetv1alpha1.AgentIdle, AgentStatusSince: &metav1.Time{Time: time.Now()},
			PaneID: fmt.Sprintf("w%d:p1", i), TerminalID: fmt.Sprintf("term-%d", i), WorkspaceID: fmt.Sprintf("w%d", i),
			AgentSessionID: fmt.Sprintf("6f0c1f4e-9a41-4b7e-8f7e-%012d", i),
		}
		if err := env.Client.Status().Update(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	cs := h.connect(b, staticToken, nil)
	var list ListOutput
	testutil.Eventually(b, "", func() error {
		got := callTool[ListOutput](b, cs, "bridge_list", map[string]any{"limit": maxListLimit})
		list = got.out
		return errIf(got.err != nil || list.Total != members, "%d of %d members listed: %v", list.Total, members, got.err)
	})
	var ms fleetv1alpha1.MemberList
	if err := h.gw.cache.List(ctx, &ms, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	full, err := h.gw.memberViews(ctx, ms.Items, &identity.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary", Namespace: ns}, nil)
	if err != nil {
		b.Fatal(err)
	}
	fullJSON, _ := json.Marshal(map[string]any{"members": full})
	var respBytes int
	for b.Loop() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bridge_list", Arguments: map[string]any{"limit": maxListLimit}})
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
		raw, _ := json.Marshal(res)
		respBytes = len(raw)
	}
	page, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bridge_list"})
	if err != nil || page.IsError {
		b.Fatal(err, page)
	}
	pageJSON, _ := json.Marshal(page)
	b.ReportMetric(float64(len(pageJSON)), "default-page-bytes")
	b.ReportMetric(float64(respBytes), "response-bytes/op")
	b.ReportMetric(float64(2*len(fullJSON)), "full-bytes/op")
	b.ReportMetric(float64(2*len(fullJSON))/float64(respBytes), "full/compact")
}
