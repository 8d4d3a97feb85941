package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
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

// Gateway serves fleetd's MCP gateway and REST surface. It is a manager
// Runnable that does not need leader election: every replica serves.
//
// It only wires: the verbs are the service's (service.go), and MCP
// (mcp.go), REST (rest.go) and the dashboard (dashboard.go) are adapters
// that decode a request, call one verb and encode its outcome.
type Gateway struct {
	svc *service
	log logr.Logger

	auth      *identity.Authenticator
	rest      *restAPI
	dashboard *dashboard
	server    *mcp.Server
	handler   http.Handler
	// synced reports whether every informer the gateway reads has synced.
	synced func() bool

	toolNamespaces map[string]ToolNamespace
	toolOrder      []string

	// cancelHolds cancels the service's holds context: every held call
	// ends when the gateway stops.
	cancelHolds context.CancelFunc

	// parkedCalls counts the held calls the gateway answers on connections
	// it took over from the HTTP server, which does not wait for them.
	parkedCalls sync.WaitGroup
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
	var delegations, members, profiles cache.Informer
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
		case *fleetv1alpha1.Profile:
			profiles = inf
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

	closed, err := newClosedView(mgr, opts.WatchNamespace)
	if err != nil {
		return nil, err
	}

	g := newGateway(opts, mgr.GetLogger().WithName("gateway"), gatewayDeps{
		cache:  mgr.GetCache(),
		live:   mgr.GetAPIReader(),
		static: static,
		closed: closed,
		client: mgr.GetClient(),
		synced: func() bool {
			for _, inf := range informers {
				if !inf.HasSynced() {
					return false
				}
			}
			return closed.HasSynced()
		},
	})
	if _, err := delegations.AddEventHandler(g.svc.rv.handler()); err != nil {
		return nil, fmt.Errorf("watching delegations: %w", err)
	}
	if _, err := delegations.AddEventHandler(g.svc.leavingHandler()); err != nil {
		return nil, fmt.Errorf("watching delegations close: %w", err)
	}
	if err := g.dashboard.viewers.watch(members, delegations, profiles); err != nil {
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
	closed              *closedStore
	client              client.Client
	synced              func() bool
}

// newGateway builds a Gateway on its dependencies; New wires them to a
// manager.
func newGateway(opts Options, log logr.Logger, d gatewayDeps) *Gateway {
	opts = opts.withDefaults()
	holds, cancel := context.WithCancel(context.Background())
	auth := identity.NewAuthenticator(identity.Config{
		Cache:        d.cache,
		Live:         d.live,
		Static:       d.static,
		StaticTokens: opts.StaticTokens,
		Reviews:      d.client,
		Namespace:    opts.Namespace,
		Clock:        opts.Clock,

		FailureBurst:    opts.AuthFailureBurst,
		FailureInterval: opts.AuthFailureInterval,
	})
	svc := newService(opts, log, d, auth, holds)
	g := &Gateway{
		svc:            svc,
		log:            log,
		auth:           auth,
		synced:         d.synced,
		toolNamespaces: map[string]ToolNamespace{},
		cancelHolds:    cancel,
	}
	g.rest = &restAPI{svc: svc, tools: g.toolsByNamespace}
	g.dashboard = newDashboard(svc)
	g.setUpMCP()
	g.handler = g.routes()
	return g
}

// NeedLeaderElection reports false: every replica serves.
func (g *Gateway) NeedLeaderElection() bool { return false }

// Handler is the gateway's HTTP handler: /mcp, the REST endpoints,
// /healthz, /readyz and /metrics.
func (g *Gateway) Handler() http.Handler { return g.handler }

// DashboardStreams is the number of dashboard streams open: one per page
// showing the fleet or a member. A page that closes ends its stream, so a
// test of the dashboard in a browser can see that closing a tab frees
// what the page cost.
func (g *Gateway) DashboardStreams() int { return g.dashboard.viewers.count() }

// Start serves HTTP on Options.Addr until ctx ends. Held calls then end
// (their Delegations record the departed waiter, so the outcome survives),
// and the processes the gateway ran are stopped.
func (g *Gateway) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.svc.opts.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", g.svc.opts.Addr, err)
	}
	srv := &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: a held call is a response that legitimately takes
		// up to MaxTimeout.
		BaseContext: func(net.Listener) context.Context { return g.svc.holds },
	}
	g.log.Info("Serving the MCP gateway", "addr", ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %w", g.svc.opts.Addr, err)
	case <-ctx.Done():
	}
	// Held calls end first, each with a result that says how to carry on
	// (their Delegations record the departed waiter); the server then waits
	// for those answers to be written. What is still running when the
	// grace ends is cancelled.
	g.svc.shutDown()
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
	g.svc.procs.KillAll(shutdown)
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
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.svc.metrics.registry, promhttp.HandlerOpts{}))
	mux.Handle("/mcp", g.authenticateWith(g.mcpHandler(), onlyDiscovery))
	g.rest.routes(mux, g.authenticate)
	g.dashboard.routes(mux, g.authenticate)
	return readBodyWithin(g.svc.opts.BodyReadTimeout, refuseOtherSites(mux))
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

// Ready reports whether the gateway serves: what /readyz says.
func (g *Gateway) Ready() bool { return g.ready() }

// authenticate resolves the caller from the request's bearer token, and
// refuses the request with 401 or 403 when it cannot. Nothing else about
// the request (headers, arguments) is trusted for identity.
func (g *Gateway) authenticate(next http.Handler) http.Handler {
	return g.authenticateWith(next, nil)
}

// authenticateWith is authenticate, where the token of a warm Pod no
// Member has claimed is let through to next, with no principal, for the
// requests unclaimed admits (nil admits none).
func (g *Gateway) authenticateWith(next http.Handler, unclaimed func(*http.Request) bool) http.Handler {
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
		if f != nil && f.Reason == identity.ReasonUnclaimedPod && unclaimed != nil && unclaimed(r) {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), unclaimedContextKey{}, true)))
			return
		}
		if f != nil {
			g.svc.metrics.authFailures.WithLabelValues(f.Reason).Inc()
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

// unclaimedContextKey marks a request let through with the token of a
// warm Pod no Member has claimed.
type unclaimedContextKey struct{}

// discoveryMethods are the MCP messages a warm Pod's agent may send
// before its Pod is claimed: it opens a session and lists the tools, as
// Claude Code and Codex do at their start, and calls none. Notifications
// (notifications/...) are let through too.
var discoveryMethods = map[string]bool{"initialize": true, "ping": true, "tools/list": true}

// maxDiscoveryBody bounds what is read of a request to tell whether it is
// discovery only; discovery is small.
const maxDiscoveryBody = 64 << 10

// onlyDiscovery says whether r is an MCP GET or DELETE, or a POST whose
// every message is one of discoveryMethods or a notification. An agent started in a warm Pod
// ahead of its claim (controllers/profile_pool.go) connects at its start,
// and neither CLI connects again to a server that refused it; its first
// tool call comes after the claim, when the same token is its Member's.
// The body is read, and put back for the handler.
func onlyDiscovery(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodDelete:
		// The stream a client opens for the server's own messages, and
		// the end of its session: no tool runs, and a refusal here would
		// make a CLI take the server for one that needs a login.
		return true
	case http.MethodPost:
	default:
		return false
	}
	if r.Body == nil {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxDiscoveryBody+1))
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), r.Body))
	if err != nil || len(b) > maxDiscoveryBody {
		return false
	}
	type message struct {
		Method string `json:"method"`
	}
	var msgs []message
	if trimmed := bytes.TrimSpace(b); len(trimmed) > 0 && trimmed[0] == '[' {
		if json.Unmarshal(trimmed, &msgs) != nil {
			return false
		}
	} else {
		var one message
		if json.Unmarshal(trimmed, &one) != nil {
			return false
		}
		msgs = []message{one}
	}
	for _, m := range msgs {
		if !discoveryMethods[m.Method] && !strings.HasPrefix(m.Method, "notifications/") {
			return false
		}
	}
	return len(msgs) > 0
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
