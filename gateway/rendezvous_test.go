package gateway

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

func TestRendezvous(t *testing.T) {
	rv := newRendezvous()
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	wa1, wa2, wb := rv.subscribe(a), rv.subscribe(a), rv.subscribe(b)
	rv.notify(a)
	rv.notify(a) // coalesces: one pending signal is enough
	for _, w := range []*waiter{wa1, wa2} {
		select {
		case <-w.wake:
		default:
			t.Error("a waiter of a was not woken")
		}
	}
	select {
	case <-wb.wake:
		t.Error("the waiter of b was woken by a")
	default:
	}
	rv.unsubscribe(a, wa1)
	rv.unsubscribe(a, wa2)
	rv.unsubscribe(b, wb)
	if n := rv.held(); n != 0 {
		t.Errorf("%d waiters left", n)
	}
	// The handler understands tombstones.
	w := rv.subscribe(a)
	rv.handler().OnDelete(withStatus("a", fleetv1alpha1.DelegationStatus{}))
	select {
	case <-w.wake:
	default:
		t.Error("delete did not wake the waiter")
	}
}
