// Package panehost is what a Member's Pod runs beside its agent, and
// fleetd's side of reaching it: the pane server (the subpackage paneserver,
// herdr's protocol over real PTYs) in the agent's container, reached by
// the controllers over mutually authenticated TLS (as the API server
// reaches a kubelet), plus the few methods a pod needs that herdr's
// protocol does not carry. cmd/paneserver runs the pane server, and the
// relay and forwarder beside it.
//
//   - tls.go: the certificates. fleetd keeps a CA; each member's pane host
//     serves a certificate minted for that Member's UID, and admits only a
//     client certificate of fleetd's own from the same CA.
//   - agent.go: the methods beyond herdr's protocol, served as the pane
//     server's extensions (Extensions): seed a known agent's configuration
//     before it starts (fleetd.agent.install), read what its hooks
//     recorded and how much context its session has left
//     (fleetd.agent.observe), say what the host does beyond herdr
//     (fleetd.host.info), and remove what a deleted member left
//     (fleetd.member.remove).
//   - files.go: a member's files read where its agent runs
//     (fleetd.file.read), within its working directory and as its user:
//     Local reads them on this machine, Remote through a pane host.
//   - relay.go: the pane host's own container, as a user other than the
//     agent's: it alone mounts the member's TLS key and the Pod's token,
//     and relays fleetd's authenticated connections to the pane server's
//     socket in the agent's container.
//   - forward.go: the gateway forwarder. The agent mounts the gateway on
//     loopback; the forwarder adds the pod's current service-account token
//     (projected for audience fleetd, bound to the Pod, rotated by the
//     kubelet), so the agent itself never holds a credential.
//   - hosts.go: fleetd's clients of pane hosts (Hosts), one per Pod,
//     reached at the Member's pod IP, checked against its UID and dropped
//     when the Pod changes; and LoadCA, which keeps the CA in a Secret.
//     Which Members run in Pods is not its to say (controllers/runtime.go
//     decides).
package panehost
