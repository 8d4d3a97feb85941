// Package herdr is a client for the socket API of herdr, the agent
// multiplexer that owns the terminals fleetd's agents run in.
//
// The wire protocol is newline-delimited JSON over a unix socket with one
// request per connection: the client dials, writes one request line, reads one
// response line and closes. A few calls hold the connection open
// (events.subscribe, agent.wait, agent.prompt with wait); while they do, herdr
// treats any byte or half-close from the client as a disconnect, so the client
// never writes after the request line.
//
// A pane host serves the same protocol over TLS, and the client multiplexes
// there: each exchange is an HTTP/2 stream of one connection (TLSServer).
//
// The types follow herdr's published JSON Schema (protocol 20, herdr 0.8.2;
// protocol 22 only adds methods). The package knows nothing of Kubernetes.
package herdr
