// Package gateway is fleetd's MCP gateway: the face primaries and workers
// call to hand each other work.
//
// One HTTP listener serves the streamable HTTP MCP endpoint at /mcp (in the
// SDK's stateless mode, so a restart or a second replica loses nothing), a
// small REST surface for non-MCP clients, /healthz, /readyz and /metrics.
// Every request carries a bearer token, and the caller's identity is resolved
// from that token alone: a member token minted by the Member controller, a
// Kubernetes service-account token (TokenReview, then RBAC through a
// SubjectAccessReview), or a static token for local use.
//
// All state lives in Delegation objects. bridge_send creates one and holds the
// call open until the worker replies, asks a question, ends its turn or the
// deadline passes; the hold is a waiter keyed by the Delegation, woken by the
// shared informer's event handler, so a thousand held calls cost no API
// traffic beyond the one watch. A call that is cancelled, or a gateway that
// restarts, ends the wait and never the Delegation: the sender re-attaches
// with the same idempotency key, or collects the outcome with bridge_poll.
//
// A member is the attacker, and so may be any other caller: every message
// and spawn passes bounds that hold however many calls arrive at once
// (limits.go, message_bounds.go). Messages are reserved, then created:
// admitted under one lock against the cache plus what this replica
// admitted and its cache does not show yet. A namespace's spawns are
// counted on the API server and created one at a time. Neither is shared
// between replicas; a ResourceQuota (config/quota) is the API server's
// bound beneath all of them.
//
// The gateway is built in layers. The service (service.go) owns the verbs
// (send, await, answer, reply, ask, poll, ack, cancel, spawn, stop, read,
// the team and process tools) with the holds, the rendezvous and the
// bounds behind them, and returns domain outcomes. Three adapters decode
// a request, call one verb and encode what it returns: MCP (mcp.go, one
// generic adapter for every tool), REST (rest.go) and the dashboard
// (dashboard.go, with its event streams in dashboard_stream.go). Gateway
// (server.go) only wires them: authentication, routes, start and stop.
// A held call is parked (park.go): the MCP SDK's request ends, and package
// heldcall answers the call later on its connection, so that a thousand
// of them cost little.
//
// Following bridge_send from the MCP call to the pane, in order:
//  1. gateway/mcp.go: addTool decodes the call, resolves the caller, and
//     calls the service's send;
//  2. gateway/send.go: send resolves the member (target.go), builds the
//     Delegation and creates it within the bounds (createDelegations);
//  3. gateway/message_bounds.go: the bounds that admit it;
//  4. gateway/hold.go: the call held until the Delegation has an outcome
//     (outcome.go decides which), woken by rendezvous.go;
//  5. controllers/delegation_controller.go: the Delegation reconciler
//     orders the member's queue and types the message;
//  6. delegation/decide.go: the pure decision of what to do next;
//  7. controllers/runtime.go: where the member's panes are;
//  8. herdr/client.go: agent.prompt on the pane's herdr.
//
// The decisions (which member a sessionId addresses, what outcome a
// Delegation shows a waiter, which Delegation a reply settles) are pure
// functions beside the handlers that use them.
package gateway
