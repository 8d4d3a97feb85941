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
// The decisions (which member a sessionId addresses, what outcome a
// Delegation shows a waiter, which Delegation a reply settles) are pure
// functions beside the handlers that use them.
package gateway
