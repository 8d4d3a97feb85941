package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
)

// Closed Delegations. The controller of a Delegation's shard marks it
// closed once it needs nothing more but retention (delegation.Closed).
// Where the gateway's cache leaves closed ones out (fleetcache's
// GatewayOptions), what it reads of them comes from elsewhere:
//   - one asked for by name (a re-attached bridge_send, bridge_status, a
//     held call whose Delegation closed as it ended, the dashboard) is read
//     from the API server;
//   - the bounds on what a sender keeps count them from the closed view, a
//     record filled from their metadata of whose each one is and how many
//     bytes it holds (the controller's marks);
//   - between the moment the cache drops one and the moment the closed view
//     shows it, the ledger counts it as leaving, so that a sender's bound
//     holds through the handover.

// closedStore is the gateway's record of closed Delegations: for each
// namespace and sender, the names of the sender's closed ones and the
// bytes each holds. A reflector of their metadata fills it, and it keeps
// nothing else of them: a few dozen bytes each, where an informer's cache
// of their metadata takes over a kilobyte.
type closedStore struct {
	mu sync.RWMutex
	// bySender files each closed Delegation under its namespace and
	// sender label, by name, with its bytes.
	bySender map[closedSender]map[string]int64
	// filed is the sender label each one is filed under.
	filed  map[types.NamespacedName]string
	synced atomic.Bool
	// run runs the reflector that fills the store until ctx ends.
	run func(ctx context.Context)
}

// closedSender is where closed Delegations are filed.
type closedSender struct{ namespace, sender string }

var _ toolscache.ReflectorStore = (*closedStore)(nil)

func newClosedStore() *closedStore {
	return &closedStore{bySender: map[closedSender]map[string]int64{}, filed: map[types.NamespacedName]string{}}
}

// newClosedView makes the record of closed Delegations of mgr's API server,
// limited to namespace when it is not empty, and adds it to mgr.
func newClosedView(mgr ctrl.Manager, namespace string) (*closedStore, error) {
	s, err := watchClosed(mgr.GetConfig(), mgr.GetHTTPClient(), namespace)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(s); err != nil {
		return nil, fmt.Errorf("adding the closed view: %w", err)
	}
	return s, nil
}

// watchClosed makes a record of the closed Delegations of cfg's API
// server, filled once started.
func watchClosed(cfg *rest.Config, hc *http.Client, namespace string) (*closedStore, error) {
	mc, err := metadata.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("creating the closed view's client: %w", err)
	}
	all := mc.Resource(fleetv1alpha1.GroupVersion.WithResource("delegations"))
	var delegations metadata.ResourceInterface = all
	if namespace != "" {
		delegations = all.Namespace(namespace)
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = fleetv1alpha1.LabelClosed
			return delegations.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = fleetv1alpha1.LabelClosed
			return delegations.Watch(ctx, o)
		},
	}
	s := newClosedStore()
	r := toolscache.NewReflectorWithOptions(lw, &metav1.PartialObjectMetadata{}, s, toolscache.ReflectorOptions{Name: "closed delegations"})
	s.run = r.RunWithContext
	return s, nil
}

// Start fills the store until ctx ends.
func (s *closedStore) Start(ctx context.Context) error {
	s.run(ctx)
	return nil
}

// NeedLeaderElection reports false: every replica's gateway counts.
func (s *closedStore) NeedLeaderElection() bool { return false }

// HasSynced reports whether the store holds the first listing.
func (s *closedStore) HasSynced() bool { return s.synced.Load() }

// Add files a closed Delegation.
func (s *closedStore) Add(obj any) error { s.file(obj); return nil }

// Update files a closed Delegation again.
func (s *closedStore) Update(obj any) error { s.file(obj); return nil }

// Delete forgets a Delegation that is no longer closed, or gone.
func (s *closedStore) Delete(obj any) error {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := apimeta.Accessor(obj)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unfile(types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()})
	return nil
}

// Replace files list instead of what the store held, at once: a count
// never sees half a listing.
func (s *closedStore) Replace(list []any, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bySender, s.filed = map[closedSender]map[string]int64{}, map[types.NamespacedName]string{}
	for _, obj := range list {
		s.fileLocked(obj)
	}
	s.synced.Store(true)
	return nil
}

// Resync does nothing: the store has nobody to tell.
func (s *closedStore) Resync() error { return nil }

// file records obj's sender and bytes under its name. A mark without
// bytes was not written by fleetd (the controller takes it off): it counts
// no bytes meanwhile.
func (s *closedStore) file(obj any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fileLocked(obj)
}

// fileLocked is file with s.mu held.
func (s *closedStore) fileLocked(obj any) {
	m, err := apimeta.Accessor(obj)
	if err != nil {
		return
	}
	key := types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}
	sender := m.GetLabels()[fleetv1alpha1.LabelSender]
	bytes, _ := delegation.MarkedBytes(m.GetAnnotations())
	s.unfile(key)
	s.filed[key] = sender
	at := closedSender{key.Namespace, sender}
	if s.bySender[at] == nil {
		s.bySender[at] = map[string]int64{}
	}
	s.bySender[at][key.Name] = bytes
}

// unfile forgets key. s.mu is held.
func (s *closedStore) unfile(key types.NamespacedName) {
	sender, ok := s.filed[key]
	if !ok {
		return
	}
	delete(s.filed, key)
	at := closedSender{key.Namespace, sender}
	delete(s.bySender[at], key.Name)
	if len(s.bySender[at]) == 0 {
		delete(s.bySender, at)
	}
}

// kept calls f with the name and bytes of each closed Delegation of the
// sender labelled sender in namespace.
func (s *closedStore) kept(namespace, sender string, f func(name string, bytes int64)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for name, bytes := range s.bySender[closedSender{namespace, sender}] {
		f(name, bytes)
	}
}

// shows reports whether the Delegation at key is closed.
func (s *closedStore) shows(key types.NamespacedName) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.filed[key]
	return ok
}

// closedKept calls f with each closed Delegation of sender in namespace
// (none without a record of them).
func (s *service) closedKept(namespace string, sender fleetv1alpha1.Principal, f func(name string, bytes int64)) {
	if s.closed != nil {
		s.closed.kept(namespace, delegation.SenderLabel(sender), f)
	}
}

// closedShows reports whether the record of closed Delegations shows the
// one at key.
func (s *service) closedShows(key types.NamespacedName) bool {
	return s.closed != nil && s.closed.shows(key)
}

// leavingMessage is a closed Delegation the cache dropped that the closed
// view may not show yet.
type leavingMessage struct {
	sender string
	bytes  int64
	since  time.Time
}

// leavingHandler records, for the ledger, each Delegation the cache drops
// because it was marked closed: the cache's last copy has no mark yet (the
// API server's watch sends the one it knew), but is closed, or superseded
// by a message the cache shows typed after it. A Delegation
// deleted while it carried the mark (retention, where the cache keeps
// closed ones) is gone, not leaving.
func (s *service) leavingHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		d, ok := obj.(*fleetv1alpha1.Delegation)
		if !ok || d.Labels[fleetv1alpha1.LabelClosed] != "" || !delegation.Closed(d, true) {
			return
		}
		if !delegation.Closed(d, false) && !s.supersededInCache(d) {
			return
		}
		l := &s.ledger
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.leaving == nil {
			l.leaving = map[types.NamespacedName]leavingMessage{}
		}
		l.leaving[client.ObjectKeyFromObject(d)] = leavingMessage{
			sender: identity.Key(d.Spec.From), bytes: delegation.Bytes(d), since: s.opts.Clock.Now(),
		}
	}}
}

// supersededInCache reports whether the cache shows a message to d's member
// typed after d (delegation.Superseded): one in flight, or settled with a
// late reply still allowed. One that closed since is out of the cache;
// d then counts nowhere until the closed view shows it.
func (s *service) supersededInCache(d *fleetv1alpha1.Delegation) bool {
	ds := []fleetv1alpha1.Delegation{*d}
	for _, state := range []string{stateActive, stateLate} {
		others, err := s.delegationsTo(context.Background(), d.Namespace, d.Spec.To, state)
		if err != nil {
			return false
		}
		for i := range others {
			if others[i].Name != d.Name {
				ds = append(ds, others[i])
			}
		}
	}
	return delegation.Superseded(ds, nil)[d.Name]
}

// forgetLeft stops counting the leaving messages the closed view shows,
// and those leaving longer than heldFor (deleted before it showed them).
// The ledger is locked.
func (s *service) forgetLeft(now time.Time) {
	for key, m := range s.ledger.leaving {
		if s.closedShows(key) || now.Sub(m.since) > heldFor {
			delete(s.ledger.leaving, key)
		}
	}
}
