package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// ownWritesTTL bounds how long a write is remembered: the cache shows it
// well before (a Delegation deleted meanwhile is never listed again).
const ownWritesTTL = time.Minute

// ownWrites remembers the Delegations the injector wrote until its cache
// shows them. A look right after a write would otherwise decide on the
// version before it, and its next write would fail with a conflict: the
// cache trails the API server by a watch event, and a member's next turn
// is often quicker. It also remembers a Delegation read from the API server
// after a conflict, for the same reason.
//
// It never guesses which of two versions is newer (resource versions are
// opaque): it knows the versions each remembered one replaced, and uses
// the remembered one only while the cache shows one of those.
type ownWrites struct {
	mu   sync.Mutex
	byID map[types.NamespacedName]*ownWrite
}

type ownWrite struct {
	d *fleetv1alpha1.Delegation
	// replaced are the versions d is newer than.
	replaced sets.Set[string]
	at       time.Time
}

// wrote records d, as the API server returned it, which replaced version
// before.
func (w *ownWrites) wrote(before string, d *fleetv1alpha1.Delegation, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byID == nil {
		w.byID = map[types.NamespacedName]*ownWrite{}
	}
	key := types.NamespacedName{Namespace: d.Namespace, Name: d.Name}
	prev := w.byID[key]
	replaced := sets.New(before)
	if prev != nil {
		replaced = replaced.Union(prev.replaced).Insert(prev.d.ResourceVersion)
	}
	replaced.Delete(d.ResourceVersion)
	w.byID[key] = &ownWrite{d: d.DeepCopy(), replaced: replaced, at: now}
}

// forget drops what is remembered of key.
func (w *ownWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byID, key)
}

// overlay replaces, in ds, each Delegation the cache shows in a version a
// remembered one replaced, and forgets the ones the cache caught up with
// or that someone wrote after.
func (w *ownWrites) overlay(ds []fleetv1alpha1.Delegation, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range ds {
		key := types.NamespacedName{Namespace: ds[i].Namespace, Name: ds[i].Name}
		own, ok := w.byID[key]
		switch {
		case !ok:
		case own.replaced.Has(ds[i].ResourceVersion):
			ds[i] = *own.d.DeepCopy()
		default:
			delete(w.byID, key)
		}
	}
	for key, own := range w.byID {
		if now.Sub(own.at) > ownWritesTTL {
			delete(w.byID, key)
		}
	}
}
