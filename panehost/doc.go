// Package panehost is what a Member's Pod runs beside its agent: fleetd's
// herdr-compatible pane server, reached by the controllers over mutually
// authenticated TLS (as the API server reaches a kubelet), plus the few
// things a pod needs that herdr's protocol does not carry.
//
//   - tls.go: the certificates. fleetd keeps a CA; each member's pane host
//     serves a certificate minted for that Member's UID, and admits only a
//     client certificate of fleetd's own from the same CA.
//   - agent.go: two methods beyond herdr's protocol, so the controllers can
//     seed a known agent's configuration in the pod and read what its hooks
//     recorded there (fleetd.agent.install, fleetd.agent.observe).
//   - relay.go: the pane host's own container, as a user other than the
//     agent's: it alone mounts the member's TLS key and the Pod's token,
//     and relays fleetd's authenticated connections to the pane server's
//     socket in the agent's container.
//   - forward.go: the gateway forwarder. The agent mounts the gateway on
//     loopback; the forwarder adds the pod's current service-account token
//     (projected for audience fleetd, bound to the Pod, rotated by the
//     kubelet), so the agent itself never holds a credential.
//   - files.go: a member's files read where its agent runs
//     (fleetd.file.read), within its working directory and as its user.
//   - hosts.go: where a Member's panes live, the shared pane server or its
//     Pod's pane host, with one client kept per Pod.
package panehost
