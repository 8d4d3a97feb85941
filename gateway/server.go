package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/process"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/herdr/detect"
)

// The gateway reads fleetd's kinds and member token Secrets cluster-wide,
// creates and settles Delegations, spawns and stops Members, and asks the
// API server about service-account tokens and their permissions. "relay" on
// delegations is fleetd's own verb: the admission policy in config/admission
// lets only a holder of it name a sender other than itself.
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=delegations,verbs=get;list;watch;create;relay
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=delegations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=members,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=profiles,verbs=get;list;watch
// The static-token Secret is read from a cache of its own, limited to it.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// Members' Pods are read to tell a replaced member Pod's token from a
// primary's.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Defaults of Options.
const (
	DefaultAddr             = "127.0.0.1:8080"
	DefaultNamespace        = "default"
	DefaultMaxTimeout       = time.Hour
	DefaultProgressInterval = 15 * time.Second
	DefaultBodyReadTimeout  = 30 * time.Second
)

// Options configure a Gateway.
type Options struct {
	// Addr is the listen address of the MCP, REST, health and metrics
	// endpoints. Default 127.0.0.1:8080.
	Addr string
	// Namespace is where static principals act. Default "default".
	Namespace string
	// StaticTokens names a Secret labelled fleet.fleetd.dev/static-token
	// whose data keys are principal names and whose values are their tokens.
	// Empty disables static tokens.
	StaticTokens types.NamespacedName
	// MaxTimeout caps timeoutMs of held calls. Default one hour.
	MaxTimeout time.Duration
	// ProgressInterval is how often a held call sends a progress
	// notification, when its client gave a progress token. Default 15s.
	ProgressInterval time.Duration
	// Features switches tool namespaces on or off. A namespace missing here
	// takes its default: bridge always on, team on, process off.
	Features map[ToolNamespace]bool
	// TeamPolicy says who may use team_manage.
	TeamPolicy TeamPolicy
	// Clock stamps the times the gateway writes and runs held calls'
	// deadlines and progress ticks. Default the real clock.
	Clock clock.WithTickerAndDelayedExecution
	// BodyReadTimeout bounds how long a request may take to send its body.
	// Default 30s.
	BodyReadTimeout time.Duration
	// Panes reads members' terminals (bridge_read) on the shared pane
	// server; nil switches that off.
	Panes PaneReader
	// PaneHosts, when set, says where each member's terminal is: the
	// shared pane server, or its Pod's pane host.
	PaneHosts PaneHosts
	// MaxHops bounds a chain of messages: a member's message sent while it
	// works on one is a hop further than that one. Default
	// delegation.DefaultPolicy.MaxHops; at most 1000.
	MaxHops int32
	// MaxQueue bounds the messages waiting for one member. Default
	// DefaultMaxQueue; negative: no bound.
	MaxQueue int
	// MaxQueuePerSender bounds one sender's share of a member's queue: the
	// messages from it waiting for that member. Default
	// DefaultMaxQueuePerSender; negative: no bound.
	MaxQueuePerSender int
	// MaxSenderMessages bounds the Delegations one sender keeps in a
	// namespace, in any phase, until retention deletes them. Default
	// DefaultMaxSenderMessages; negative: no bound.
	MaxSenderMessages int
	// MaxSenderBytes bounds the bytes (content and images) of those
	// Delegations. Default DefaultMaxSenderBytes; negative: no bound.
	MaxSenderBytes int64
	// SenderRate is how many messages a second one principal may send,
	// SenderBurst how many at once. Defaults DefaultSenderRate and
	// DefaultSenderBurst; a negative rate: no bound.
	SenderRate  float64
	SenderBurst int
	// MaxSpawns bounds the members one principal answers for: those it
	// spawned, those they spawned, and a lead's team. Default
	// DefaultMaxSpawns; negative: no bound.
	MaxSpawns int
	// MaxMembers bounds the members of a namespace the gateway spawns up
	// to. Default DefaultMaxMembers; negative: no bound.
	MaxMembers int
	// Detectors are the screen rules by agent label, as the controllers
	// run them (bridge_read source detection explains them); nil loads
	// fleetd's built-in ones.
	Detectors map[string]*detect.Detector
	// MemberFiles reads the image files members send by path; nil refuses
	// image paths (images in the call still go).
	MemberFiles MemberFiles
	// MaxHeldCalls bounds the calls one principal holds open at once
	// (bridge_send, bridge_ask, bridge_cancel waiting on a message); one
	// more is refused with throttled. Default DefaultMaxHeldCalls;
	// negative: no bound.
	MaxHeldCalls int
	// MaxDashboardStreams bounds the dashboard streams one principal
	// keeps open at once; one more is refused with 429. Default
	// DefaultMaxDashboardStreams; negative: no bound.
	MaxDashboardStreams int
	// AuthFailureBurst is how many authentications one client address may
	// fail before it is refused with throttled, and AuthFailureInterval
	// how often it may then try once more. Default
	// identity.DefaultFailureBurst and identity.DefaultFailureInterval; a
	// negative burst: no throttle.
	AuthFailureBurst    int
	AuthFailureInterval time.Duration
}

// PaneHosts says which pane host a member's panes live on.
// *panehost.Hosts satisfies it with PaneHostsFunc.
type PaneHosts interface {
	For(m *fleetv1alpha1.Member) (PaneReader, error)
}

// PaneHostsFunc makes a func a PaneHosts.
type PaneHostsFunc func(m *fleetv1alpha1.Member) (PaneReader, error)

// For implements PaneHosts.
func (f PaneHostsFunc) For(m *fleetv1alpha1.Member) (PaneReader, error) { return f(m) }

// PaneReader is what the gateway needs of herdr. *herdr.Client satisfies it.
type PaneReader interface {
	PaneRead(ctx context.Context, p herdr.ReadParams) (*herdr.PaneRead, error)
	// AgentGet gives the terminal title and status the screen rules see.
	AgentGet(ctx context.Context, target string) (*herdr.AgentInfo, error)
}

// withDefaults fills in unset options.
func (o Options) withDefaults() Options {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = DefaultMaxTimeout
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.BodyReadTimeout <= 0 {
		o.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if o.MaxHops <= 0 {
		o.MaxHops = delegation.DefaultPolicy.MaxHops
	}
	o.MaxHops = min(o.MaxHops, 1000)
	for _, limit := range []struct {
		v   *int
		def int
	}{
		{&o.MaxQueue, DefaultMaxQueue}, {&o.MaxQueuePerSender, DefaultMaxQueuePerSender}, {&o.MaxSenderMessages, DefaultMaxSenderMessages},
		{&o.SenderBurst, DefaultSenderBurst}, {&o.MaxSpawns, DefaultMaxSpawns}, {&o.MaxMembers, DefaultMaxMembers},
		{&o.MaxHeldCalls, DefaultMaxHeldCalls}, {&o.MaxDashboardStreams, DefaultMaxDashboardStreams},
	} {
		if *limit.v == 0 {
			*limit.v = limit.def
		}
	}
	if o.MaxSenderBytes == 0 {
		o.MaxSenderBytes = DefaultMaxSenderBytes
	}
	if o.SenderRate == 0 {
		o.SenderRate = DefaultSenderRate
	}
	return o
}

// Gateway serves fleetd's MCP gateway and REST surface. It is a manager
// Runnable that does not need leader election: every replica serves.
type Gateway struct {
	opts Options
	log  logr.Logger

	// cache is the manager's shared cache: Delegations, Members, Profiles
	// and member token Secrets.
	cache client.Reader
	// live reads from the API server, where the cache may trail.
	live client.Reader
	// client writes.
	client client.Client

	auth    *identity.Authenticator
	rv      *rendezvous
	viewers *viewers
	screens *screenFeeds
	metrics *metrics
	procs   *process.Table
	server  *mcp.Server
	handler http.Handler
	// synced reports whether every informer the gateway reads has synced.
	synced func() bool

	toolNamespaces map[string]ToolNamespace
	toolOrder      []string

	// holds is the base context of requests served by Start; cancelling it
	// ends every held call when the gateway stops.
	holds       context.Context
	cancelHolds context.CancelFunc
	// stopping is closed when the gateway starts shutting down: held calls
	// end with a result.
	stopping chan struct{}

	// heldCalls and streams bound what each principal holds open.
	heldCalls, streams *principalSlots

	// detachSlots bounds concurrent departed-waiter writes.
	detachSlots chan struct{}
	// parkedCalls counts the held calls the gateway answers on connections
	// it took over from the HTTP server, which does not wait for them.
	parkedCalls sync.WaitGroup

	// panics counts recovered handler panics.
	panics atomic.Int64

	// spawnLocks serialise each namespace's spawns (limits.go).
	spawnLocks stripedLocks
	// ledger admits messages within their bounds (message_bounds.go).
	ledger messageLedger
}

var _ manager.LeaderElectionRunnable = (*Gateway)(nil)

// New creates a Gateway on mgr: it registers the field indexes and informers
// it reads (one per kind, shared with the rest of the manager), and adds
// itself to mgr as a Runnable that serves HTTP on Options.Addr. The
// static-token Secret, if configured, is watched by a small cache of its own
// limited to that one object.
func New(mgr ctrl.Manager, opts Options) (*Gateway, error) {
	opts = opts.withDefaults()
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	for _, ix := range []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&fleetv1alpha1.Delegation{}, indexReceiverState, indexReceiverStateFunc},
		{&fleetv1alpha1.Delegation{}, indexSenderState, indexSenderStateFunc},
		{&fleetv1alpha1.Delegation{}, indexSender, indexSenderFunc},
		{&fleetv1alpha1.Member{}, identity.IndexMemberTokenHash, identity.IndexMemberToken},
		{&fleetv1alpha1.Member{}, identity.IndexMemberPodUID, identity.IndexMemberPod},
	} {
		if err := idx.IndexField(ctx, ix.obj, ix.field, ix.fn); err != nil {
			return nil, fmt.Errorf("indexing %T by %s: %w", ix.obj, ix.field, err)
		}
	}

	var informers []cache.Informer
	var delegations, members cache.Informer
	// Member token Secrets are watched so that a deleted or rotated one
	// stops its token at once.
	for _, obj := range []client.Object{&fleetv1alpha1.Delegation{}, &fleetv1alpha1.Member{}, &fleetv1alpha1.Profile{}, &corev1.Secret{}} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return nil, fmt.Errorf("getting the informer for %T: %w", obj, err)
		}
		switch obj.(type) {
		case *fleetv1alpha1.Delegation:
			delegations = inf
		case *fleetv1alpha1.Member:
			members = inf
		}
		informers = append(informers, inf)
	}

	var static client.Reader
	if opts.StaticTokens.Name != "" {
		c, err := cache.New(mgr.GetConfig(), cache.Options{
			HTTPClient:        mgr.GetHTTPClient(),
			Scheme:            mgr.GetScheme(),
			Mapper:            mgr.GetRESTMapper(),
			DefaultNamespaces: map[string]cache.Config{opts.StaticTokens.Namespace: {}},
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Secret{}: {Field: fields.OneTermEqualSelector("metadata.name", opts.StaticTokens.Name)},
			},
		})
		if err != nil {
			return nil, fmt.Errorf("creating the static-token cache: %w", err)
		}
		inf, err := c.GetInformer(ctx, &corev1.Secret{}, cache.BlockUntilSynced(false))
		if err != nil {
			return nil, fmt.Errorf("getting the static-token informer: %w", err)
		}
		informers = append(informers, inf)
		if err := mgr.Add(tokenCache{c}); err != nil {
			return nil, fmt.Errorf("adding the static-token cache: %w", err)
		}
		static = c
	}

	g := newGateway(opts, mgr.GetLogger().WithName("gateway"), gatewayDeps{
		cache:  mgr.GetCache(),
		live:   mgr.GetAPIReader(),
		static: static,
		client: mgr.GetClient(),
		synced: func() bool {
			for _, inf := range informers {
				if !inf.HasSynced() {
					return false
				}
			}
			return true
		},
	})
	if _, err := delegations.AddEventHandler(g.rv.handler()); err != nil {
		return nil, fmt.Errorf("watching delegations: %w", err)
	}
	if err := g.viewers.watch(members, delegations); err != nil {
		return nil, err
	}
	if err := mgr.Add(g); err != nil {
		return nil, fmt.Errorf("adding the gateway to the manager: %w", err)
	}
	return g, nil
}

// tokenCache runs the static-token cache among the manager's caches, so it
// has synced before the gateway serves, on every replica.
type tokenCache struct{ cache.Cache }

// GetCache places the cache in the manager's cache group.
func (c tokenCache) GetCache() cache.Cache { return c.Cache }

// gatewayDeps are the Gateway's connections to the API server.
type gatewayDeps struct {
	cache, live, static client.Reader
	client              client.Client
	synced              func() bool
}

// newGateway builds a Gateway on its dependencies; New wires them to a
// manager.
func newGateway(opts Options, log logr.Logger, d gatewayDeps) *Gateway {
	opts = opts.withDefaults()
	holds, cancel := context.WithCancel(context.Background())
	g := &Gateway{
		opts:   opts,
		log:    log,
		cache:  d.cache,
		live:   d.live,
		client: d.client,
		auth: identity.NewAuthenticator(identity.Config{
			Cache:        d.cache,
			Live:         d.live,
			Static:       d.static,
			StaticTokens: opts.StaticTokens,
			Reviews:      d.client,
			Namespace:    opts.Namespace,
			Clock:        opts.Clock,

			FailureBurst:    opts.AuthFailureBurst,
			FailureInterval: opts.AuthFailureInterval,
		}),
		rv:             newRendezvous(),
		viewers:        newViewers(),
		metrics:        newMetrics(),
		procs:          process.NewTable(),
		synced:         d.synced,
		toolNamespaces: map[string]ToolNamespace{},
		holds:          holds,
		cancelHolds:    cancel,
		stopping:       make(chan struct{}),
		detachSlots:    make(chan struct{}, detachWriters),
		heldCalls:      newPrincipalSlots(opts.MaxHeldCalls),
		streams:        newPrincipalSlots(opts.MaxDashboardStreams),
	}
	g.screens = newScreenFeeds(g)
	g.setUpMCP()
	g.handler = g.routes()
	return g
}

// NeedLeaderElection reports false: every replica serves.
func (g *Gateway) NeedLeaderElection() bool { return false }

// Handler is the gateway's HTTP handler: /mcp, the REST endpoints,
// /healthz, /readyz and /metrics.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Start serves HTTP on Options.Addr until ctx ends. Held calls then end
// (their Delegations record the departed waiter, so the outcome survives),
// and the processes the gateway ran are stopped.
func (g *Gateway) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.opts.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", g.opts.Addr, err)
	}
	srv := &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: a held call is a response that legitimately takes
		// up to MaxTimeout.
		BaseContext: func(net.Listener) context.Context { return g.holds },
	}
	g.log.Info("Serving the MCP gateway", "addr", ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %w", g.opts.Addr, err)
	case <-ctx.Done():
	}
	// Held calls end first, each with a result that says how to carry on
	// (their Delegations record the departed waiter); the server then waits
	// for those answers to be written. What is still running when the
	// grace ends is cancelled.
	close(g.stopping)
	g.rv.stop()
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*detachTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		g.log.Error(err, "Shutting down the MCP gateway")
	}
	parked := make(chan struct{})
	go func() {
		g.parkedCalls.Wait()
		close(parked)
	}()
	select {
	case <-parked:
	case <-shutdown.Done():
	}
	g.cancelHolds()
	g.procs.KillAll(shutdown)
	return nil
}

// routes builds the HTTP handler.
func (g *Gateway) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !g.ready() {
			http.Error(w, errNotReady.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.metrics.registry, promhttp.HandlerOpts{}))
	mux.Handle("/mcp", g.authenticate(g.mcpHandler()))
	mux.Handle("POST /members", g.authenticate(http.HandlerFunc(g.restSpawn)))
	mux.Handle("DELETE /members/{paneId}", g.authenticate(http.HandlerFunc(g.restStop)))
	mux.Handle("GET /agents", g.authenticate(http.HandlerFunc(g.restAgents)))
	mux.Handle("GET /v1/mcp/capabilities", g.authenticate(http.HandlerFunc(g.restCapabilities)))
	mux.Handle("GET /v1/diagnostics/providers", g.authenticate(http.HandlerFunc(g.restProviders)))
	g.dashboardRoutes(mux)
	return readBodyWithin(g.opts.BodyReadTimeout, refuseOtherSites(mux))
}

// readBodyWithin gives every request timeout to send its body. The deadline
// is on reading only and is lifted once the body is read, so a held call's
// response, which takes as long as the call is held, is never cut; a
// request refused before its body is read (no valid token) has its
// connection closed when the deadline passes instead of kept open by a
// client that sends slowly.
func readBodyWithin(timeout time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.Body == nil || r.Body == http.NoBody || rc.SetReadDeadline(time.Now().Add(timeout)) != nil {
			next.ServeHTTP(w, r)
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline at the end of the body.
type deadlineBody struct {
	io.ReadCloser
	lift   func()
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		b.lift()
	}
	return n, err
}

// errNotReady answers requests until the cache has synced.
var errNotReady = errors.New("the gateway is starting: its cache has not synced yet")

// ready reports whether the informers have synced.
func (g *Gateway) ready() bool { return g.synced == nil || g.synced() }

// allow checks that the caller may do what acc says: RBAC's answer for a
// service account, the gateway's own rules for the others.
func (g *Gateway) allow(ctx context.Context, p *identity.Principal, acc identity.Access) error {
	if f := g.auth.Authorize(ctx, p, acc); f != nil {
		return f.ToolError()
	}
	return nil
}

// authenticate resolves the caller from the request's bearer token, and
// refuses the request with 401 or 403 when it cannot. Nothing else about
// the request (headers, arguments) is trusted for identity.
func (g *Gateway) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.ready() {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: toolerr.New(toolerr.Internal, "%s", errNotReady.Error())})
			return
		}
		token, ok := identity.BearerToken(r)
		var p *identity.Principal
		var f *identity.Failure
		if !ok {
			f = &identity.Failure{Code: toolerr.Unauthorized, Reason: "missing_token", Message: "send a bearer token: Authorization: Bearer <token>"}
		} else {
			p, f = g.auth.AuthenticateFrom(r.Context(), token, clientAddress(r))
		}
		if f != nil {
			g.metrics.authFailures.WithLabelValues(f.Reason).Inc()
			if f.Code == toolerr.Throttled {
				w.Header().Set("Retry-After", "1")
			}
			if f.Code == toolerr.Unauthorized {
				challenge := `Bearer realm="fleetd"`
				if ok {
					challenge += `, error="invalid_token"`
				}
				w.Header().Set("WWW-Authenticate", challenge)
			}
			writeError(w, f.ToolError())
			return
		}
		ctx := context.WithValue(r.Context(), principalContextKey{}, p)
		ctx = context.WithValue(ctx, requestContextKey{}, r.Context())
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// clientAddress is the address a request came from, which failed
// authentications are counted by: the connection's peer, never a header a
// client writes.
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
