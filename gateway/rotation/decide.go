// Package rotation keeps the gateway's Service from sending clients to a
// replica that died where no kubelet can say so.
//
// A replica whose process dies is taken out of the Service by its kubelet
// within a second. One whose node is lost is not: its Pod stays Ready, and
// the Service sends it a share of the new connections, until the node
// controller gives up on the node (its monitor grace period, 40 s by
// default). Each fleetd Pod therefore carries a readiness gate, Gate:
//
//   - a replica sets its own Pod's Gate True once its gateway serves;
//   - a replica in the rotation that sees another's Lease go unrenewed
//     (QuietAfter) and its gateway not answer (Misses probes in a row)
//     sets that Pod's Gate and Ready conditions False, as the node
//     controller would: the Service drops it at once, and its kubelet, if
//     it lives, keeps it out until the replica sets its Gate True again.
//
// Both signals are needed: a replica too busy to renew for a while still
// answers, and one cut off from its peers still renews.
package rotation

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Gate is the readiness gate a fleetd Pod's spec lists.
const Gate corev1.PodConditionType = "fleetd.dev/gateway-serving"

// Policy says when a replica is taken for dead.
type Policy struct {
	// QuietAfter is how long its Lease goes unrenewed before its gateway
	// is probed.
	QuietAfter time.Duration
	// Misses is how many probes in a row it fails before it leaves the
	// rotation.
	Misses int
}

// DefaultPolicy: a replica renews its Lease every second, so 2 s of quiet
// is two renewals missed; probed every half second, it is out about a
// second later.
var DefaultPolicy = Policy{QuietAfter: 2 * time.Second, Misses: 2}

// Self is this replica as its Pod and gateway show it.
type Self struct {
	// Gated: its Pod lists Gate. A Pod that does not is not in this
	// scheme, and nothing is done.
	Gated bool
	// Serving: its gateway is ready.
	Serving bool
	// In: its Pod's Gate is True.
	In bool
}

// Peer is another replica's Pod, with what this replica knows of it.
type Peer struct {
	Name string
	// Ready: its Pod's Ready condition is True, so the Service sends it
	// clients.
	Ready bool
	// Quiet is how long its Lease has gone unrenewed; Known is false when
	// this replica has seen no Lease of it.
	Quiet time.Duration
	Known bool
	// Misses is how many of its probes in a row failed.
	Misses int
}

// Suspect reports whether p is to be probed: in the rotation, with a
// Lease gone quiet.
func (pol Policy) Suspect(p Peer) bool {
	return p.Ready && p.Known && p.Quiet >= pol.QuietAfter
}

// Decision is what a replica writes.
type Decision struct {
	// SetIn: set its own Gate True.
	SetIn bool
	// TakeOut are the peers whose Gate and Ready to set False.
	TakeOut []string
}

// Decide is what a replica does about itself and its peers. Only a
// replica in the rotation judges the others: one that was taken out, or
// has not started serving, may be the one cut off.
func Decide(self Self, peers []Peer, pol Policy) Decision {
	var d Decision
	if !self.Gated {
		return d
	}
	d.SetIn = self.Serving && !self.In
	if !self.Serving || !self.In {
		return d
	}
	for _, p := range peers {
		if pol.Suspect(p) && p.Misses >= pol.Misses {
			d.TakeOut = append(d.TakeOut, p.Name)
		}
	}
	return d
}
