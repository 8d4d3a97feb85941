package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// ownWrites is what a controller wrote that its cache may not show yet.
// The watch that fills the cache trails a write by a moment; a look in
// between would decide again on the version before the write, and a write
// made on it would only fail with a conflict. Each written object is kept,
// with the versions it replaced, until the cache moves past them: then the
// cache shows the write, or something newer (a watch delivers an object's
// versions in order).
type ownWrites struct {
	mu     sync.Mutex
	byName map[types.NamespacedName]ownWrite
}

type ownWrite struct {
	// replaced holds the resourceVersions the write replaced: the one it
	// was made on and, when that was an earlier write the cache did not
	// show yet, the ones that write replaced.
	replaced sets.Set[string]
	written  client.Object
}

// replaces says whether the cache's obj is a version the write replaced.
func (w ownWrite) replaces(obj client.Object) bool {
	return obj.GetUID() == w.written.GetUID() && w.replaced.Has(obj.GetResourceVersion())
}

// wrote records that obj, read at resourceVersion replaced, was written and
// is now obj.
func (o *ownWrites) wrote(replaced string, obj client.Object) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byName == nil {
		o.byName = map[types.NamespacedName]ownWrite{}
	}
	key := client.ObjectKeyFromObject(obj)
	versions := sets.New(replaced)
	if w, ok := o.byName[key]; ok && w.written.GetUID() == obj.GetUID() && w.written.GetResourceVersion() == replaced {
		versions = versions.Union(w.replaced)
	}
	o.byName[key] = ownWrite{replaced: versions, written: obj.DeepCopyObject().(client.Object)}
}

// forget drops what was recorded of key: it was deleted, or a write on it
// failed and the cache decides again.
func (o *ownWrites) forget(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.byName, key)
}

// current is obj (read from the cache) as last written, when the cache does
// not show that write yet; else obj itself. A cache that moved past the
// write ends its record.
func (o *ownWrites) current(obj client.Object) client.Object {
	o.mu.Lock()
	defer o.mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	w, ok := o.byName[key]
	switch {
	case !ok:
		return obj
	case w.replaces(obj):
		return w.written.DeepCopyObject().(client.Object)
	}
	delete(o.byName, key)
	return obj
}

// prune drops the records drop says no longer matter, such as those of
// objects deleted since they were written.
func (o *ownWrites) prune(drop func(client.Object) bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, w := range o.byName {
		if drop(w.written) {
			delete(o.byName, key)
		}
	}
}

// overlayQueue replaces, in ds (member's whole queue, read from the
// cache), each Delegation whose last write by this injector the cache does
// not show yet with what was written. A record of the queue that ds does
// not hold is of a Delegation since deleted, and goes.
func (o *ownWrites) overlayQueue(member types.NamespacedName, ds []fleetv1alpha1.Delegation) {
	listed := make(map[types.NamespacedName]bool, len(ds))
	for i := range ds {
		listed[client.ObjectKeyFromObject(&ds[i])] = true
		ds[i] = *o.current(&ds[i]).(*fleetv1alpha1.Delegation)
	}
	o.prune(func(obj client.Object) bool {
		d, ok := obj.(*fleetv1alpha1.Delegation)
		return ok && d.Namespace == member.Namespace && d.Spec.To == member.Name && !listed[client.ObjectKeyFromObject(d)]
	})
}
