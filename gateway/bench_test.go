package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/internal/fleetcache"
	"github.com/fleetd/fleetd/internal/testutil"
)

// heldWaiters is how many calls the memory benchmarks hold at once.
const heldWaiters = 10000

// inUse is the memory a process holds for live objects and goroutine
// stacks, after a collection.
func inUse() uint64 {
	heap, stack := memInUse()
	return heap + stack
}

// memInUse is the memory a process holds for live objects, and for
// goroutine stacks, after a collection. (A collection also shrinks the
// stacks of goroutines that use little of theirs.)
func memInUse() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse
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
		if err := g.svc.client.Create(ctx, d); err != nil {
			b.Fatal(err)
		}
		seeds[i] = d
	}
	c := &call{tool: "bridge_send", who: &identity.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary", Namespace: "fuzz"}}
	never := func(*fleetv1alpha1.Delegation) bool { return false }

	var perHold, goroutines float64
	for b.Loop() {
		before, beforeG := inUse(), runtime.NumGoroutine()
		hctx, release := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, d := range seeds {
			wg.Go(func() { _, _ = g.svc.hold(hctx, c, client.ObjectKeyFromObject(d), nil, time.Hour, never) })
		}
		for g.svc.rv.held() < heldWaiters {
			time.Sleep(10 * time.Millisecond)
		}
		// Let every waiter reach its select before measuring.
		time.Sleep(100 * time.Millisecond)
		perHold = float64(inUse()-before) / heldWaiters
		goroutines = float64(runtime.NumGoroutine()-beforeG) / heldWaiters
		release()
		wg.Wait()
	}
	b.ReportMetric(perHold, "B/hold")
	b.ReportMetric(goroutines, "goroutines/hold")
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

// Environment of the load generator the held-call benchmarks run as a
// child process, so that the client's memory is not counted with the
// gateway's.
const (
	loadEnvURL   = "FLEETD_GATEWAY_LOAD_URL"
	loadEnvToken = "FLEETD_GATEWAY_LOAD_TOKEN"
	loadEnvCalls = "FLEETD_GATEWAY_LOAD_CALLS"
	// loadEnvPause is how long the generator pauses after every hundred
	// calls.
	loadEnvPause = "FLEETD_GATEWAY_LOAD_PAUSE"
	// benchEnvHolds overrides heldWaiters for the held-call benchmarks.
	benchEnvHolds = "FLEETD_BENCH_HOLDS"
)

// benchHolds is how many calls the held-call benchmarks hold at once.
func benchHolds() int {
	if v, err := strconv.Atoi(os.Getenv(benchEnvHolds)); err == nil && v > 0 {
		return v
	}
	return heldWaiters
}

// heldCost is what a server process pays per call it holds open.
type heldCost struct {
	held int
	// bytes is heap and stack; stack is the goroutine stacks' part.
	bytes, stack float64
	goroutines   float64
}

// measureHolds opens n calls against url from a child process, waits until
// held (the server's own count of held calls) stops growing, and measures
// the memory and goroutines the process gained per held call. pause paces
// the calls (after every hundred). The calls stay open until release is
// called; release returns once the child has closed them all.
func measureHolds(b *testing.B, label, url, token string, n int, pause time.Duration, held func() int) (heldCost, func()) {
	// FLEETD_BENCH_HEAPPROFILE=<path> writes a heap profile of each
	// measurement to <path>.<label>.
	b.Helper()
	beforeHeap, beforeStack := memInUse()
	beforeG := runtime.NumGoroutine()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), loadEnvURL+"="+url, loadEnvToken+"="+token,
		fmt.Sprintf("%s=%d", loadEnvCalls, n), fmt.Sprintf("%s=%s", loadEnvPause, pause))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// Wait until the holds stop growing: on a busy machine a few calls may
	// fail, and those are not held.
	started, count, grew := time.Now(), 0, time.Now()
	for count < n && time.Since(grew) < 10*time.Second {
		time.Sleep(100 * time.Millisecond)
		if now := held(); now > count {
			count, grew = now, time.Now()
		}
	}
	if count < n*9/10 {
		b.Fatalf("only %d of %d calls held", count, n)
	}
	b.Logf("%d of %d calls held after %v", count, n, time.Since(started).Round(time.Millisecond))
	// Let every call reach its wait before measuring.
	time.Sleep(time.Second)
	heap, stack := memInUse()
	cost := heldCost{
		held:       count,
		bytes:      (float64(heap+stack) - float64(beforeHeap+beforeStack)) / float64(count),
		stack:      (float64(stack) - float64(beforeStack)) / float64(count),
		goroutines: float64(runtime.NumGoroutine()-beforeG) / float64(count),
	}
	if path := os.Getenv("FLEETD_BENCH_HEAPPROFILE"); path != "" {
		f, err := os.Create(path + "." + label)
		if err == nil {
			_ = pprof.WriteHeapProfile(f)
			_ = f.Close()
		}
	}
	release := func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Fatalf("load generator: %v", err)
		}
	}
	return cost, release
}

// BenchmarkHeldCalls measures the gateway process's memory and goroutines
// per held bridge_send end to end, with heldWaiters calls held at once: the
// HTTP connection, whatever serves the MCP request, the hold, and the
// Delegation in the informer's cache. A child process opens the calls over
// plain TCP, one HTTP/1.1 connection each, as separate clients would.
//
// The baseline, measured in the same run, is the same calls held by a bare
// net/http server whose handler only waits for the client to hang up: what
// any Go HTTP server pays to keep a request open. B/hold/http is the ratio.
// The baseline runs second: Go never frees a goroutine's descriptor (about
// 400 bytes), it reuses it, so whichever runs second pays less for its
// goroutines, and the gateway's figure is the one that must be whole.
func BenchmarkHeldCalls(b *testing.B) {
	n := benchHolds()
	ns := env.Namespace(b)
	// All the calls go to one member from one sender at once: its queue,
	// and the sender's bounds and rate, take them all.
	h := startGateway(b, ns, Options{MaxQueue: -1, MaxQueuePerSender: -1, MaxSenderMessages: -1, MaxSenderBytes: -1, SenderRate: -1, MaxHeldCalls: -1})
	addMember(b, member("w1", ns).Obj())
	ctx := context.Background()

	var gw, bare heldCost
	for b.Loop() {
		var release func()
		gw, release = measureHolds(b, "gateway", h.url, staticToken, n, 200*time.Millisecond, h.gw.svc.rv.held)
		// Deleting the Delegations ends the holds without a write each.
		if err := env.Client.DeleteAllOf(ctx, &fleetv1alpha1.Delegation{}, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		for h.gw.svc.rv.held() > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		release()
		bare = holdBareHTTP(b, n)
	}
	b.ReportMetric(gw.bytes, "B/hold")
	b.ReportMetric(gw.stack, "stack-B/hold")
	b.ReportMetric(gw.goroutines, "goroutines/hold")
	b.ReportMetric(bare.bytes, "http-B/hold")
	b.ReportMetric(bare.goroutines, "http-goroutines/hold")
	b.ReportMetric(gw.bytes/bare.bytes, "B/hold/http")
}

// holdBareHTTP measures n calls held by a bare net/http server, configured
// as the gateway's is, whose handler reads the request and waits for the
// client to hang up.
func holdBareHTTP(b *testing.B, n int) heldCost {
	b.Helper()
	var held atomic.Int64
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			held.Add(1)
			defer held.Add(-1)
			<-r.Context().Done()
		}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	cost, release := measureHolds(b, "http", "http://"+ln.Addr().String(), staticToken, n, 10*time.Millisecond, func() int { return int(held.Load()) })
	release()
	return cost
}

// BenchmarkHeldCallLayers measures, one at a time, the layers a held
// bridge_send went through before the gateway answered held calls itself,
// with heldWaiters calls (or Delegations) at once:
//   - http: a bare net/http connection with a request held open (its
//     connection goroutine and background reader, buffers, the request);
//   - sdk: the same through the MCP SDK's stateless streamable handler to a
//     tool that blocks (the SDK's per-request session, jsonrpc2 connection,
//     reader and handler goroutines), on top of http;
//   - cache: one Delegation, as bridge_send makes them, in an informer's
//     cache with the gateway's indexes.
//
// BenchmarkHeldWaiters measures the hold itself. Run each layer on its
// own (-bench 'BenchmarkHeldCallLayers/sdk') for a whole figure: a layer
// measured after another reuses the goroutine descriptors the first left.
func BenchmarkHeldCallLayers(b *testing.B) {
	n := benchHolds()
	b.Run("http", func(b *testing.B) {
		var cost heldCost
		for b.Loop() {
			cost = holdBareHTTP(b, n)
		}
		b.ReportMetric(cost.bytes, "B/hold")
		b.ReportMetric(cost.stack, "stack-B/hold")
		b.ReportMetric(cost.goroutines, "goroutines/hold")
	})
	b.Run("sdk", func(b *testing.B) {
		var cost heldCost
		for b.Loop() {
			cost = holdSDK(b, n)
		}
		b.ReportMetric(cost.bytes, "B/hold")
		b.ReportMetric(cost.stack, "stack-B/hold")
		b.ReportMetric(cost.goroutines, "goroutines/hold")
	})
	b.Run("cache", func(b *testing.B) {
		ns := env.Namespace(b)
		createHeldDelegations(b, ns, n)
		var perDelegation float64
		for b.Loop() {
			perDelegation = float64(cachedDelegationBytes(b, ns, fleetcache.Options(), n)) / float64(n)
		}
		b.ReportMetric(perDelegation, "B/delegation")
	})
}

// holdSDK measures n tools/call requests held by the MCP SDK's stateless
// streamable handler, set up as the gateway sets it up, to a bridge_send
// tool that blocks until the measurement is over.
func holdSDK(b *testing.B, n int) heldCost {
	b.Helper()
	var held atomic.Int64
	release := make(chan struct{})
	server := mcp.NewServer(&mcp.Implementation{Name: "bench"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "bridge_send"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ SendInput) (*mcp.CallToolResult, *SendOutput, error) {
		held.Add(1)
		defer held.Add(-1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, &SendOutput{Outcome: outcomeTimeout}, nil
	})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		Stateless: true, PropagateRequestCancellation: true, MaxRequestBodyBytes: 4 * fleetv1alpha1.MaxContentBytes,
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	cost, done := measureHolds(b, "sdk", "http://"+ln.Addr().String(), "", n, 10*time.Millisecond, func() int { return int(held.Load()) })
	close(release)
	done()
	return cost
}

// createHeldDelegations creates n Delegations in ns as bridge_send creates
// them, a few at a time.
func createHeldDelegations(b *testing.B, ns string, n int) {
	b.Helper()
	createDelegations(b, ns, n, func(i int) string { return fmt.Sprintf("held call %d", i) })
}

// createDelegations creates n Delegations to w1 in ns as bridge_send
// creates them, the i-th with content(i), a few at a time.
func createDelegations(b *testing.B, ns string, n int, content func(i int) string) {
	b.Helper()
	g := &Gateway{svc: &service{opts: Options{}.withDefaults()}}
	p := &identity.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary", Namespace: ns}
	to := member("w1", ns).Obj()
	parallel(b, n, func(i int) error {
		return env.Client.Create(context.Background(), g.svc.newDelegation(p, to, content(i), true, 3600))
	})
}

// cachedDelegationBytes measures the memory a cache with opts of the
// Delegations in ns takes, with the gateway's indexes; it must hold n.
func cachedDelegationBytes(b *testing.B, ns string, opts cache.Options, n int) int64 {
	b.Helper()
	opts.Scheme = env.Scheme
	opts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	before := inUse()
	c, err := cache.New(env.Config, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ix := range []struct {
		field string
		fn    client.IndexerFunc
	}{{indexReceiverState, indexReceiverStateFunc}, {indexSenderState, indexSenderStateFunc}} {
		if err := c.IndexField(ctx, &fleetv1alpha1.Delegation{}, ix.field, ix.fn); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.GetInformer(ctx, &fleetv1alpha1.Delegation{}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("the cache did not sync")
	}
	cached := func() int {
		var list fleetv1alpha1.DelegationList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			b.Fatal(err)
		}
		return len(list.Items)
	}()
	if cached != n {
		b.Fatalf("the cache holds %d of %d delegations", cached, n)
	}
	used := int64(inUse() - before)
	runtime.KeepAlive(c)
	return used
}

// BenchmarkGatewayCacheHistory: the gateway's cache of a namespace whose
// messages are mostly history (settled, collected, kept for retention):
// every Delegation cached, as a cache shared with the controllers holds
// them, against closed ones left out (fleetcache.GatewayOptions), in one
// run. 2,000 messages of 1 KB, 1,800 of them closed.
func BenchmarkGatewayCacheHistory(b *testing.B) {
	const n, open = 2000, 200
	ns := env.Namespace(b)
	prompt := strings.Repeat("x", 1000)
	createDelegations(b, ns, n, func(i int) string { return fmt.Sprintf("%s %d", prompt, i) })
	var list fleetv1alpha1.DelegationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	parallel(b, len(list.Items)-open, func(i int) error {
		d := &list.Items[i]
		delegation.BeginDelivery(d, time.Now(), delegation.Target{PaneID: "w1:p1", TerminalID: "term-1"})
		if err := delegation.Reply(d, time.Now(), "done"); err != nil {
			return err
		}
		if err := env.Client.Status().Update(context.Background(), d); err != nil {
			return err
		}
		marked := d.DeepCopy()
		if !delegation.MarkClosed(marked, false) {
			return fmt.Errorf("delegation %s is not closed", d.Name)
		}
		return env.Client.Patch(context.Background(), marked, client.MergeFrom(d))
	})
	var whole, trimmed, closed int64
	for b.Loop() {
		whole = cachedDelegationBytes(b, ns, fleetcache.Options(), n)
		trimmed = cachedDelegationBytes(b, ns, fleetcache.GatewayOptions(), open)
		closed = closedViewBytes(b, ns, n-open)
	}
	b.ReportMetric(float64(whole)/(1<<20), "whole-MiB")
	b.ReportMetric(float64(trimmed)/(1<<20), "trimmed-MiB")
	b.ReportMetric(float64(closed)/(1<<20), "closed-view-MiB")
	b.ReportMetric(float64(trimmed+closed)/float64(whole), "(trimmed+closed-view)/whole")
}

// closedViewBytes measures the memory the gateway's record of the closed
// Delegations in ns takes; it must hold n.
func closedViewBytes(b *testing.B, ns string, n int) int64 {
	b.Helper()
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	before := inUse()
	s, err := watchClosed(env.Config, hc, ns)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	for !s.HasSynced() {
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.RLock()
	held := len(s.filed)
	s.mu.RUnlock()
	if held != n {
		b.Fatalf("the closed view holds %d of %d delegations", held, n)
	}
	used := int64(inUse() - before)
	runtime.KeepAlive(s)
	return used
}

// parallel runs f for 0..n-1 on 16 goroutines, and fails b on the first
// error.
func parallel(b *testing.B, n int, f func(i int) error) {
	b.Helper()
	next := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			b.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// generateLoad is the child process of the held-call benchmarks: it opens
// the calls and keeps their connections until its stdin closes. It speaks
// the 2025-06-18 revision, which a stateless server takes without a
// handshake.
func generateLoad() error {
	base, err := url.Parse(os.Getenv(loadEnvURL))
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(os.Getenv(loadEnvCalls))
	if err != nil {
		return err
	}
	pause, err := time.ParseDuration(os.Getenv(loadEnvPause))
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
			time.Sleep(pause)
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
	if err := h.gw.svc.cache.List(ctx, &ms, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	full, err := h.gw.svc.memberViews(ctx, ms.Items, &identity.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary", Namespace: ns}, nil)
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
