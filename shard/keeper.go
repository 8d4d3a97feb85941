package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Default lease settings: a replica renews its own Lease every second;
// one that has not renewed for 8 s is taken for dead and its shards are
// taken over; one that could not renew for 6 s stops its controllers
// before anyone else may start them. A replica whose container crashed
// takes its shards back as soon as it runs again, whatever these say; a
// replica that stops cleanly hands them over at once; only a replica that
// vanishes (its node lost) is waited for. Shorter settings stopped busy
// replicas on a 2-core machine: renewals queued behind the API server's
// other work for longer than 3 s.
const (
	DefaultLeaseDuration = 8 * time.Second
	DefaultRenewDeadline = 6 * time.Second
	DefaultRenewPeriod   = time.Second
)

// Lease values of fleetv1alpha1.LabelLease.
const (
	LeaseShard   = "shard"
	LeaseReplica = "replica"
)

// ShardLeaseName is the Lease of shard i.
func ShardLeaseName(i int) string { return "fleetd-shard-" + strconv.Itoa(i) }

// ShardOfLease is the shard, of count, whose Lease l is; false when l is
// not one.
func ShardOfLease(l *coordinationv1.Lease, count int) (int, bool) {
	if l.Labels[fleetv1alpha1.LabelLease] != LeaseShard {
		return 0, false
	}
	s, ok := Parse(strings.TrimPrefix(l.Name, "fleetd-shard-"), count)
	return s, ok && l.Name == ShardLeaseName(s)
}

// ByShard picks the shard Leases, of count shards, out of leases, by
// shard.
func ByShard(leases []coordinationv1.Lease, count int) map[int]*coordinationv1.Lease {
	out := map[int]*coordinationv1.Lease{}
	for i := range leases {
		if s, ok := ShardOfLease(&leases[i], count); ok {
			out[s] = &leases[i]
		}
	}
	return out
}

// Holders maps each shard of byShard to the replica its Lease names (""
// for none).
func Holders(byShard map[int]*coordinationv1.Lease) map[int]string {
	out := make(map[int]string, len(byShard))
	for i, l := range byShard {
		out[i] = ptr.Deref(l.Spec.HolderIdentity, "")
	}
	return out
}

// ReplicaLeaseName is the Lease replica id renews while it lives.
func ReplicaLeaseName(id string) string { return "fleetd-replica-" + id }

// Keeper holds one replica's Leases: its own, which it renews every
// RenewPeriod and by which the others know it lives, and one for each shard
// it owns, whose holder names it. A shard's Lease is written only when it
// changes hands, so the API server's load is one write a second a replica,
// whatever the shard count.
//
// Apply runs the controllers of the shards owned. The Keeper calls it
// before it frees a shard's Lease, and after it takes one: a shard's
// controllers never run on two replicas at once, as long as a replica
// that cannot renew for RenewDeadline stops before the others, who wait
// LeaseDuration by their own clocks, take its shards.
type Keeper struct {
	// Client writes the Leases.
	Client client.Client
	// Reader lists them: a cache watching them, so that a step looks at
	// the Leases as they are without a request; Client when nil.
	Reader    client.Reader
	Namespace string
	// Identity names this replica; unique among live replicas (its Pod's
	// name).
	Identity string
	Count    int

	LeaseDuration, RenewDeadline, RenewPeriod time.Duration
	Clock                                     clock.WithTicker
	Log                                       logr.Logger
	// Apply runs the controllers of exactly the owned shards, and returns
	// once those of any other shard have stopped.
	Apply func(ctx context.Context, owned []int) error
	// Metrics, when set, counts the shards held and their changes.
	Metrics *Metrics
	// Gone, when set, reports a replica known to have stopped for good
	// before its Lease runs out: its shards are free goneGrace renewal
	// periods after it is first seen gone, instead of after LeaseDuration.
	// It must report only a replica that can no longer write, such as one
	// whose Pod is gone from the API server (its token is bound to the
	// Pod, and the API server refuses it from then on); such a replica
	// stops its shards at its next renewal, refused (Unauthorized).
	Gone func(identity string) bool
	// Failed, when set, reports controllers that stopped by themselves:
	// the Keeper then frees its shards and ends with the error.
	Failed <-chan error

	// self is this replica's Lease as last written (the renewals' own).
	self *coordinationv1.Lease

	mu        sync.Mutex
	owned     []int
	lastRenew time.Time
	renewed   bool
	// refused says the last renewal was refused as unauthorized: this
	// replica's credentials are no longer good (its Pod is gone).
	refused bool
	// seen and goneAt are the decision loop's own: goneAt is when, by
	// this replica's clock, Gone first reported a replica.
	seen   map[string]observed
	goneAt map[string]time.Time
	// renewSeen is when each other replica's renewal was last seen to
	// change, by this replica's clock: seen's, for QuietFor.
	renewSeen map[string]time.Time
}

// goneGrace is how many renewal periods a replica reported Gone keeps its
// shards: time for it to see its renewal refused and stop them first.
const goneGrace = 2

// forgetAfter is how long, in lease durations, a replica's Lease stays
// after it stopped renewing: a replica that died without deleting it.
const forgetAfter = 15

// observed is a replica's Lease as last seen: its renewTime and when,
// by this replica's clock, that changed.
type observed struct {
	renew time.Time
	at    time.Time
}

// Owned is the shards this replica runs the controllers of now.
func (k *Keeper) Owned() []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.owned)
}

// NeedLeaderElection is false: the shards' Leases are the election.
func (k *Keeper) NeedLeaderElection() bool { return false }

// Start keeps the Leases until ctx ends, then stops the controllers, frees
// the shards and deletes this replica's Lease, so that the others take its
// shards at once instead of after LeaseDuration.
func (k *Keeper) Start(ctx context.Context) error {
	if k.Clock == nil {
		k.Clock = clock.RealClock{}
	}
	// The renewals go on while a step waits for controllers to stop.
	renewCtx, stopRenewing := context.WithCancel(ctx)
	var renewing sync.WaitGroup
	renewing.Go(func() {
		t := k.Clock.NewTicker(k.RenewPeriod)
		defer t.Stop()
		for {
			if err := k.Renew(renewCtx); err != nil && renewCtx.Err() == nil {
				k.Log.Error(err, "Renewing this replica's lease")
			}
			select {
			case <-renewCtx.Done():
				return
			case <-t.C():
			}
		}
	})
	stop := func() error {
		stopRenewing()
		renewing.Wait()
		return k.shutdown()
	}
	// A step looks four times a renewal: a Lease that stopped being
	// renewed is seen within a quarter of a period of when it ran out.
	t := k.Clock.NewTicker(k.RenewPeriod / 4)
	defer t.Stop()
	for {
		if err := k.Step(ctx); err != nil && ctx.Err() == nil {
			k.Log.Error(err, "Keeping the shards' leases")
		}
		select {
		case <-ctx.Done():
			return stop()
		case err := <-k.Failed:
			return errors.Join(fmt.Errorf("the shards' controllers stopped: %w", err), stop())
		case <-t.C():
		}
	}
}

func (k *Keeper) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	owned := k.Owned()
	if err := k.apply(ctx, nil); err != nil {
		return err
	}
	var errs []error
	for _, i := range owned {
		errs = append(errs, k.release(ctx, i))
	}
	self := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: ReplicaLeaseName(k.Identity)}}
	errs = append(errs, client.IgnoreNotFound(k.Client.Delete(ctx, self)))
	return errors.Join(errs...)
}

// Tick renews this replica's Lease and takes a Step.
func (k *Keeper) Tick(ctx context.Context) error {
	return errors.Join(k.Renew(ctx), k.Step(ctx))
}

// Renew renews this replica's own Lease.
func (k *Keeper) Renew(ctx context.Context) error {
	now := k.Clock.Now()
	err := k.renewSelf(ctx, now)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.renewed = err == nil
	k.refused = apierrors.IsUnauthorized(err)
	if err != nil {
		return fmt.Errorf("renewing lease %s: %w", ReplicaLeaseName(k.Identity), err)
	}
	k.lastRenew = now
	return nil
}

// Step looks at every shard's Lease and takes one step of Decide's plan.
// While the last renewal failed it decides nothing; once none succeeded
// for RenewDeadline it stops every shard.
func (k *Keeper) Step(ctx context.Context) error {
	now := k.Clock.Now()
	k.mu.Lock()
	lastRenew, renewed, refused := k.lastRenew, k.renewed, k.refused
	k.mu.Unlock()
	if (now.Sub(lastRenew) > k.RenewDeadline || refused) && len(k.Owned()) > 0 {
		// Fenced: the others may take these shards once LeaseDuration
		// passes by their clocks, or at once when this replica's Pod is
		// gone (then its renewal is refused); stop first.
		k.Log.Info("Could not renew this replica's lease; stopping its shards", "since", lastRenew, "refused", refused)
		k.Metrics.changed("lost", len(k.Owned()))
		if err := k.apply(ctx, nil); err != nil {
			return err
		}
	}
	if !renewed {
		return nil
	}
	var leases coordinationv1.LeaseList
	reader := k.Reader
	if reader == nil {
		reader = k.Client
	}
	if err := reader.List(ctx, &leases, client.InNamespace(k.Namespace), client.HasLabels{fleetv1alpha1.LabelLease}); err != nil {
		return fmt.Errorf("listing the shards' leases: %w", err)
	}
	view, byShard, stale := k.look(leases.Items, now)
	k.noteRenewals()
	for _, l := range stale {
		// Conditional: a replica that renews after all keeps its Lease.
		if err := k.Client.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting the lease of replica %s, dead since %s: %w", ptr.Deref(l.Spec.HolderIdentity, ""), k.seen[ptr.Deref(l.Spec.HolderIdentity, "")].renew, err)
		}
	}
	owned := k.Owned()
	var lost []int
	for _, i := range owned {
		if view.Holders[i] != k.Identity {
			lost = append(lost, i)
		}
	}
	if len(lost) > 0 {
		k.Log.Info("Shards were taken over by another replica", "shards", lost)
		k.Metrics.changed("lost", len(lost))
		if err := k.apply(ctx, without(owned, lost)); err != nil {
			return err
		}
	}
	plan := Decide(view)
	if len(plan.Release) > 0 {
		if err := k.apply(ctx, without(k.Owned(), plan.Release)); err != nil {
			return err
		}
		for _, i := range plan.Release {
			if err := k.release(ctx, i); err != nil {
				return err
			}
		}
		k.Metrics.changed("released", len(plan.Release))
		k.Log.Info("Released shards over this replica's share", "shards", plan.Release, "owned", len(k.Owned()))
	}
	// Shards to take: free ones by the plan, and those this replica's
	// Leases name but it does not run (its own from before its process
	// started again, or taken in a step whose Apply failed), taken again
	// so that the Lease says since when.
	take := slices.Clone(plan.Acquire)
	for i, h := range view.Holders {
		if h == k.Identity && !slices.Contains(k.Owned(), i) && !slices.Contains(plan.Release, i) && !slices.Contains(lost, i) && !slices.Contains(take, i) {
			take = append(take, i)
		}
	}
	acquired, err := k.acquireAll(ctx, take, byShard, now)
	if len(acquired) > 0 {
		k.Metrics.changed("acquired", len(acquired))
		err = errors.Join(err, k.apply(ctx, append(k.Owned(), acquired...)))
	}
	return err
}

// acquireAll takes shards at once, each by a write of its own: on a busy
// API server a takeover of many shards one write after another took
// seconds. It returns the shards taken, in order; a shard another replica
// took first is skipped.
func (k *Keeper) acquireAll(ctx context.Context, shards []int, byShard map[int]*coordinationv1.Lease, now time.Time) ([]int, error) {
	taken := make([]bool, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for n, i := range shards {
		wg.Go(func() {
			from, err := k.acquire(ctx, i, byShard[i], now)
			switch {
			case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
				// Another replica took it first.
			case err != nil:
				errs[n] = fmt.Errorf("taking shard %d: %w", i, err)
			default:
				taken[n] = true
				if from != "" && from != k.Identity {
					k.Metrics.takeover()
					k.Log.Info("Took over a shard from a replica that stopped", "shard", i, "from", from, "lastRenewed", k.seen[from].renew)
				}
			}
		})
	}
	wg.Wait()
	var acquired []int
	for n, i := range shards {
		if taken[n] {
			acquired = append(acquired, i)
		}
	}
	return acquired, errors.Join(errs...)
}

// look reads the Leases into a View, noting which replicas renewed.
// It returns too the Leases of replicas long dead, to delete.
func (k *Keeper) look(leases []coordinationv1.Lease, now time.Time) (View, map[int]*coordinationv1.Lease, []*coordinationv1.Lease) {
	view := View{Count: k.Count, Me: k.Identity, Holders: map[int]string{}, Alive: sets.New(k.Identity)}
	byShard := map[int]*coordinationv1.Lease{}
	present := sets.New[string]()
	var stale []*coordinationv1.Lease
	if k.seen == nil {
		k.seen = map[string]observed{}
	}
	for i := range leases {
		l := &leases[i]
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		switch l.Labels[fleetv1alpha1.LabelLease] {
		case LeaseShard:
			s, ok := ShardOfLease(l, k.Count)
			if !ok {
				continue
			}
			byShard[s] = l
			view.Holders[s] = holder
		case LeaseReplica:
			if holder == "" || holder == k.Identity || l.Spec.RenewTime == nil {
				continue
			}
			present.Insert(holder)
			renew := l.Spec.RenewTime.Time
			if o, ok := k.seen[holder]; !ok || !o.renew.Equal(renew) {
				k.seen[holder] = observed{renew: renew, at: now}
			}
			switch quiet := now.Sub(k.seen[holder].at); {
			case quiet < k.LeaseDuration && !k.goneFor(holder, now):
				view.Alive.Insert(holder)
			case quiet > forgetAfter*k.LeaseDuration:
				stale = append(stale, l)
			}
		}
	}
	for id := range k.seen {
		if !present.Has(id) {
			delete(k.seen, id)
			delete(k.goneAt, id)
		}
	}
	return view, byShard, stale
}

// noteRenewals copies, for QuietFor, when each replica was last seen to
// renew.
func (k *Keeper) noteRenewals() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.renewSeen = make(map[string]time.Time, len(k.seen))
	for id, o := range k.seen {
		k.renewSeen[id] = o.at
	}
}

// QuietFor is how long, by this replica's clock, another replica's Lease
// has gone without a renewal seen; false when this replica knows no such
// replica (none seen yet, or its Lease is gone).
func (k *Keeper) QuietFor(id string, now time.Time) (time.Duration, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	at, ok := k.renewSeen[id]
	if !ok {
		return 0, false
	}
	return now.Sub(at), true
}

// goneFor reports whether Gone has reported replica id for goneGrace
// renewal periods by now.
func (k *Keeper) goneFor(id string, now time.Time) bool {
	if k.Gone == nil || !k.Gone(id) {
		delete(k.goneAt, id)
		return false
	}
	if k.goneAt == nil {
		k.goneAt = map[string]time.Time{}
	}
	at, ok := k.goneAt[id]
	if !ok {
		k.goneAt[id], at = now, now
	}
	return now.Sub(at) >= goneGrace*k.RenewPeriod
}

// renewSelf writes this replica's Lease renewed at now: one request, an
// update of the Lease as last written, unless that is unknown or stale.
func (k *Keeper) renewSelf(ctx context.Context, now time.Time) error {
	l := k.self
	if l == nil {
		l = &coordinationv1.Lease{}
		key := client.ObjectKey{Namespace: k.Namespace, Name: ReplicaLeaseName(k.Identity)}
		err := k.Client.Get(ctx, key, l)
		switch {
		case apierrors.IsNotFound(err):
			l = k.lease(key.Name, LeaseReplica, now)
			if err := k.Client.Create(ctx, l); err != nil {
				return err
			}
			k.self = l
			return nil
		case err != nil:
			return err
		}
	}
	next := l.DeepCopy()
	next.Spec.HolderIdentity = ptr.To(k.Identity)
	next.Spec.RenewTime = &metav1.MicroTime{Time: now}
	next.Spec.LeaseDurationSeconds = ptr.To(int32(k.LeaseDuration.Seconds()))
	if err := k.Client.Update(ctx, next); err != nil {
		// Changed or deleted by someone else: read it again next time.
		k.self = nil
		return err
	}
	k.self = next
	return nil
}

// acquire names this replica the holder of shard i's Lease, conditional on
// the Lease as looked at; it returns the holder it took it from.
func (k *Keeper) acquire(ctx context.Context, i int, l *coordinationv1.Lease, now time.Time) (string, error) {
	if l == nil {
		return "", k.Client.Create(ctx, k.lease(ShardLeaseName(i), LeaseShard, now))
	}
	from := ptr.Deref(l.Spec.HolderIdentity, "")
	l = l.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(k.Identity)
	l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}
	l.Spec.LeaseDurationSeconds = ptr.To(int32(k.LeaseDuration.Seconds()))
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	return from, k.Client.Update(ctx, l)
}

// release frees shard i's Lease if this replica still holds it.
func (k *Keeper) release(ctx context.Context, i int) error {
	l := &coordinationv1.Lease{}
	if err := k.Client.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: ShardLeaseName(i)}, l); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != k.Identity {
		return nil
	}
	l.Spec.HolderIdentity = nil
	if err := k.Client.Update(ctx, l); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("releasing shard %d: %w", i, err)
	}
	return nil
}

func (k *Keeper) lease(name, kind string, now time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: k.Namespace, Name: name,
			Labels: map[string]string{fleetv1alpha1.LabelLease: kind, "app.kubernetes.io/managed-by": "fleetd"},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(k.Identity),
			LeaseDurationSeconds: ptr.To(int32(k.LeaseDuration.Seconds())),
			AcquireTime:          &metav1.MicroTime{Time: now},
			RenewTime:            &metav1.MicroTime{Time: now},
		},
	}
}

// apply runs the controllers of owned, and records them as owned.
func (k *Keeper) apply(ctx context.Context, owned []int) error {
	owned = slices.Clone(owned)
	slices.Sort(owned)
	owned = slices.Compact(owned)
	k.mu.Lock()
	same := slices.Equal(owned, k.owned)
	k.mu.Unlock()
	if same {
		return nil
	}
	if err := k.Apply(ctx, owned); err != nil {
		return fmt.Errorf("running the controllers of shards %v: %w", owned, err)
	}
	k.mu.Lock()
	k.owned = owned
	k.mu.Unlock()
	k.Metrics.owned(len(owned))
	return nil
}

func without(s, drop []int) []int {
	return slices.DeleteFunc(slices.Clone(s), func(i int) bool { return slices.Contains(drop, i) })
}

// Metrics are the shards a replica holds and how they change hands.
type Metrics struct {
	count     prometheus.Gauge
	held      prometheus.Gauge
	changes   *prometheus.CounterVec
	takeovers prometheus.Counter
}

// NewMetrics registers the shard metrics of count shards on reg.
func NewMetrics(reg prometheus.Registerer, count int) (*Metrics, error) {
	m := &Metrics{
		count: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_shards", Help: "Shards the fleet is split into (--shards): the sum of fleetd_shards_owned over replicas, once every shard has an owner.",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetd_shards_owned", Help: "Shards whose controllers this replica runs.",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_shard_changes_total", Help: "Shards this replica acquired, released (over its share) or lost (taken over, or its own lease not renewed in time).",
		}, []string{"event"}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetd_shard_takeovers_total", Help: "Shards this replica took over from a replica that stopped renewing its lease.",
		}),
	}
	m.count.Set(float64(count))
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.count, m.held, m.changes, m.takeovers}
}

// MetricDescs describes every metric of the shards, for tools that check
// what fleetd serves.
func MetricDescs() []*prometheus.Desc {
	m, err := NewMetrics(prometheus.NewRegistry(), DefaultCount)
	if err != nil {
		panic(err)
	}
	ch := make(chan *prometheus.Desc, 8)
	go func() {
		defer close(ch)
		for _, c := range m.collectors() {
			c.Describe(ch)
		}
	}()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

func (m *Metrics) owned(n int) {
	if m != nil {
		m.held.Set(float64(n))
	}
}

func (m *Metrics) changed(event string, n int) {
	if m != nil {
		m.changes.WithLabelValues(event).Add(float64(n))
	}
}

func (m *Metrics) takeover() {
	if m != nil {
		m.takeovers.Inc()
	}
}
