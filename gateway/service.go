package gateway

import (
	"context"
	"sync/atomic"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/process"
)

// service is the gateway's core: the verbs every surface offers, with the
// holds, the rendezvous and the bounds behind them. Its verbs take the
// caller (a call) and a decoded request, and return a domain outcome or a
// *toolerr.Error; they know nothing of MCP, REST or the dashboard, which
// are adapters around them.
//
// The verbs, by file:
//   - send.go: send (create, re-attach by dispatch id or idempotency key,
//     answer a question) and await;
//   - reply.go: reply and ask, a worker's side of a message;
//   - inbox.go: poll and ack, outcomes nobody waited for;
//   - cancel.go: cancel;
//   - fleet.go: status, list, profiles, whoami, and spawn and stop
//     (members.go);
//   - team.go: a team's status, message and manage;
//   - read.go: read a member's terminal;
//   - process.go: the process tools;
//   - diagnostics.go: the providers' health.
//
// Behind them: hold.go (a call held on a Delegation), rendezvous.go
// (waking it), limits.go and message_bounds.go (what a caller may create),
// images.go, store.go (reads and status writes) and views.go.
type service struct {
	opts Options
	log  logr.Logger

	// cache is the manager's shared cache: Delegations, Members, Profiles
	// and member token Secrets.
	cache client.Reader
	// live reads from the API server, where the cache may trail.
	live client.Reader
	// closed records closed Delegations (closed.go); nil when there is no
	// record.
	closed *closedStore
	// client writes.
	client client.Client

	// auth answers whether a principal may do something (RBAC).
	auth    *identity.Authenticator
	rv      *rendezvous
	metrics *metrics
	procs   *process.Table

	// holds is the base context of held calls; it is cancelled when the
	// gateway stops.
	holds context.Context
	// stopping is closed when the gateway starts shutting down: held calls
	// end with a result.
	stopping chan struct{}

	// heldCalls bounds the calls each principal holds open.
	heldCalls *principalSlots
	// detachSlots bounds concurrent departed-waiter writes.
	detachSlots chan struct{}

	// spawnLocks serialise each namespace's spawns (limits.go).
	spawnLocks stripedLocks
	// ledger admits messages within their bounds (message_bounds.go).
	ledger messageLedger

	// panics counts recovered panics of tool handlers and parked calls.
	panics atomic.Int64
}

// newService builds the core on its connections to the API server; holds
// is the context every held call derives from.
func newService(opts Options, log logr.Logger, d gatewayDeps, auth *identity.Authenticator, holds context.Context) *service {
	return &service{
		opts:        opts,
		log:         log,
		cache:       d.cache,
		live:        d.live,
		closed:      d.closed,
		client:      d.client,
		auth:        auth,
		rv:          newRendezvous(),
		metrics:     newMetrics(),
		procs:       process.NewTable(),
		holds:       holds,
		stopping:    make(chan struct{}),
		detachSlots: make(chan struct{}, detachWriters),
		heldCalls:   newPrincipalSlots(opts.MaxHeldCalls),
	}
}

// allow checks that the caller may do what acc says: RBAC's answer for a
// service account, the gateway's own rules for the others.
func (s *service) allow(ctx context.Context, p *identity.Principal, acc identity.Access) error {
	if f := s.auth.Authorize(ctx, p, acc); f != nil {
		return f.ToolError()
	}
	return nil
}

// shutDown ends every held call with a result that says how to carry on, and
// wakes nothing more.
func (s *service) shutDown() {
	close(s.stopping)
	s.rv.stop()
}
