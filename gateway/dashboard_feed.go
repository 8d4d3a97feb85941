package gateway

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// viewers fans Member, Delegation and Profile events out to the open
// dashboard streams, as the rendezvous does for held calls: the shared
// informers' handlers mark what changed on every viewer that shows it and
// wake it, never blocking; the viewer's own request goroutine then reads
// the changed objects from the cache the informer updated before calling
// the handler. A viewer is only an entry here while its request runs, so a
// closed tab leaves nothing behind: no goroutine, no watch.
type viewers struct {
	mu   sync.Mutex
	open map[*viewer]struct{}
}

// viewer is one open dashboard stream: the fleet view of a namespace, or
// the page of one member of it.
type viewer struct {
	namespace string
	// member is the member a member page shows; empty for the fleet view.
	member string
	// wake has room for one signal: the viewer reads everything marked
	// since it last looked.
	wake chan struct{}

	mu sync.Mutex
	// marked is what changed since the viewer last looked.
	marked viewerChanges
}

// viewerChanges are the names of the Members, Delegations and Profiles
// (pools) changed since a viewer last looked.
type viewerChanges struct {
	members, messages, pools sets.Set[string]
}

// newViewerChanges is nothing changed.
func newViewerChanges() viewerChanges {
	return viewerChanges{members: sets.New[string](), messages: sets.New[string](), pools: sets.New[string]()}
}

func newViewers() *viewers { return &viewers{open: map[*viewer]struct{}{}} }

// subscribe registers a viewer. Call it before the first read, so that no
// change between the read and the wait is lost, and unsubscribe when the
// stream ends.
func (vs *viewers) subscribe(namespace, member string) *viewer {
	v := &viewer{namespace: namespace, member: member, wake: make(chan struct{}, 1), marked: newViewerChanges()}
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.open[v] = struct{}{}
	return v
}

func (vs *viewers) unsubscribe(v *viewer) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	delete(vs.open, v)
}

// count is the number of open streams.
func (vs *viewers) count() int {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	return len(vs.open)
}

// memberChanged marks a Member on every viewer that shows it.
func (vs *viewers) memberChanged(m *fleetv1alpha1.Member) {
	vs.mark(m.Namespace, m.Name, "")
}

// messageChanged marks a Delegation's member on every viewer that shows it
// (its queue changed), and the Delegation itself on that member's pages.
func (vs *viewers) messageChanged(d *fleetv1alpha1.Delegation) {
	if d.Spec.To == "" {
		return
	}
	vs.mark(d.Namespace, d.Spec.To, d.Name)
}

// poolChanged marks a Profile on every fleet view of its namespace: the
// fleet view shows the namespace's warm pools, a member page none.
func (vs *viewers) poolChanged(p *fleetv1alpha1.Profile) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for v := range vs.open {
		if v.namespace != p.Namespace || v.member != "" {
			continue
		}
		v.mu.Lock()
		v.marked.pools.Insert(p.Name)
		v.mu.Unlock()
		v.wakeUp()
	}
}

func (vs *viewers) mark(namespace, member, message string) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for v := range vs.open {
		if v.namespace != namespace || (v.member != "" && v.member != member) {
			continue
		}
		v.mu.Lock()
		v.marked.members.Insert(member)
		if message != "" && v.member != "" {
			v.marked.messages.Insert(message)
		}
		v.mu.Unlock()
		v.wakeUp()
	}
}

// wakeUp signals the viewer without blocking: a signal already waiting
// covers this change too.
func (v *viewer) wakeUp() {
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// take returns and clears what changed since the viewer last looked.
func (v *viewer) take() viewerChanges {
	v.mu.Lock()
	defer v.mu.Unlock()
	marked := v.marked
	v.marked = newViewerChanges()
	return marked
}

// watch adds the viewers' handlers to the shared Member, Delegation and
// Profile informers.
func (vs *viewers) watch(members, delegations, profiles cache.Informer) error {
	if _, err := members.AddEventHandler(objectHandler(func(o client.Object) {
		if m, ok := o.(*fleetv1alpha1.Member); ok {
			vs.memberChanged(m)
		}
	})); err != nil {
		return fmt.Errorf("watching members for the dashboard: %w", err)
	}
	if _, err := delegations.AddEventHandler(objectHandler(func(o client.Object) {
		if d, ok := o.(*fleetv1alpha1.Delegation); ok {
			vs.messageChanged(d)
		}
	})); err != nil {
		return fmt.Errorf("watching delegations for the dashboard: %w", err)
	}
	if _, err := profiles.AddEventHandler(objectHandler(func(o client.Object) {
		if p, ok := o.(*fleetv1alpha1.Profile); ok {
			vs.poolChanged(p)
		}
	})); err != nil {
		return fmt.Errorf("watching profiles for the dashboard: %w", err)
	}
	return nil
}

// objectHandler calls changed with the object of every add, update and
// delete, the last known state of a deleted one included.
func objectHandler(changed func(client.Object)) toolscache.ResourceEventHandler {
	call := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if o, ok := obj.(client.Object); ok {
			changed(o)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, obj any) { call(obj) },
		DeleteFunc: call,
	}
}
