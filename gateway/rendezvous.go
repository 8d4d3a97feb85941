package gateway

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// rendezvous fans Delegation events out to the calls held on them. The
// shared informer's event handler wakes every waiter of the changed
// Delegation; a waiter then reads the Delegation from the same cache, which
// the informer updated before calling the handler. Waiters subscribe before
// their first read, so no change between the read and the wait is lost.
type rendezvous struct {
	mu sync.Mutex
	// waiters are the subscriptions of each key; nearly always one.
	waiters map[types.NamespacedName][]*waiter
}

// waiter is one held call's subscription to one Delegation.
type waiter struct {
	// wake has room for one signal: a waiter only needs to know that
	// something changed since it last read, not how often.
	wake chan struct{}
	// poke, when set, is called instead of signalling wake, with
	// eventChanged, and with eventStopping when the gateway stops: a parked
	// call waits in heldcall's Call.Wait (a read of its connection, where
	// it was taken over), not on a channel.
	poke func(holdEvent)
}

func newRendezvous() *rendezvous {
	return &rendezvous{waiters: make(map[types.NamespacedName][]*waiter)}
}

// subscribe registers a waiter for key. Call it before reading the
// Delegation, and unsubscribe when the call ends.
func (r *rendezvous) subscribe(key types.NamespacedName) *waiter {
	return r.add(key, &waiter{wake: make(chan struct{}, 1)})
}

// subscribePoke registers a waiter for key that is told of a change by a
// call of poke, which must not block.
func (r *rendezvous) subscribePoke(key types.NamespacedName, poke func(holdEvent)) *waiter {
	return r.add(key, &waiter{poke: poke})
}

func (r *rendezvous) add(key types.NamespacedName, w *waiter) *waiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiters[key] = append(r.waiters[key], w)
	return w
}

// unsubscribe removes a waiter.
func (r *rendezvous) unsubscribe(key types.NamespacedName, w *waiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.waiters[key]
	if i := slices.Index(ws, w); i >= 0 {
		ws[i] = ws[len(ws)-1]
		ws[len(ws)-1] = nil
		ws = ws[:len(ws)-1]
	}
	if len(ws) == 0 {
		delete(r.waiters, key)
		return
	}
	r.waiters[key] = ws
}

// notify wakes every waiter of key without blocking the informer.
func (r *rendezvous) notify(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.waiters[key] {
		if w.poke != nil {
			w.poke(eventChanged)
			continue
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// stop tells every waiter that is poked that the gateway stops (the others
// see the gateway's stopping channel).
func (r *rendezvous) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ws := range r.waiters {
		for _, w := range ws {
			if w.poke != nil {
				w.poke(eventStopping)
			}
		}
	}
}

// held is the number of subscribed waiters.
func (r *rendezvous) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ws := range r.waiters {
		n += len(ws)
	}
	return n
}

// handler is the informer event handler that drives the rendezvous.
func (r *rendezvous) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.notifyObject(obj) },
		UpdateFunc: func(_, obj any) { r.notifyObject(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			r.notifyObject(obj)
		},
	}
}

func (r *rendezvous) notifyObject(obj any) {
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	r.notify(client.ObjectKeyFromObject(o))
	if d, ok := o.(*fleetv1alpha1.Delegation); ok && d.Spec.To != "" {
		r.notify(receiverKey(d.Namespace, d.Spec.To))
	}
}

// receiverKey is the rendezvous key of every Delegation to a member, for a
// worker waiting for its delivery to reach the cache. Object names cannot
// contain '/', so it never names a Delegation.
func receiverKey(namespace, member string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: "to/" + member}
}
