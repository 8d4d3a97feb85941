package gateway

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// The bounds on the messages a sender keeps, and on how fast it sends.
// Every Delegation is held in etcd until retention deletes it, whatever
// its phase, so the bounds count what a sender keeps, not only what waits:
// messages and their bytes (content and images) per sender and namespace,
// a sender's share of each member's queue (so that one sender cannot keep
// a member's queue full for every other), the member's queue itself, and
// a rate of messages per principal.
//
// Reserve, then create. A call's messages are admitted under one lock that
// counts what the cache shows plus what this replica admitted and the
// cache does not show yet (created a moment ago, or being created), and
// the admitted messages are held in that count until the cache shows them.
// Each admitted message is named at admission, not by the API server, so
// that one the cache shows already, while it is still held, counts once.
// A closed message, which the cache may leave out, counts toward what its
// sender keeps from the record of closed ones, and as leaving while it
// moves from the one to the other (closed.go).
// So on one replica the bounds hold exactly, however many calls arrive at
// once, but for a closed message in the instant between the cache dropping
// it and its informer telling the ledger (the handler runs just after the
// cache changed). Replicas count each other's messages only once their caches show
// them: N replicas together may pass a bound by what the others create
// within their cache's lag. The API server's exact bound beneath them all
// is a ResourceQuota on count/delegations.fleet.fleetd.dev (config/quota),
// refused as quota_exceeded.

// Defaults of the message bounds.
const (
	// DefaultMaxQueuePerSender is a quarter of DefaultMaxQueue: four
	// senders may fill a member's queue, one may not.
	DefaultMaxQueuePerSender = DefaultMaxQueue / 4
	DefaultMaxSenderMessages = 1000
	DefaultMaxSenderBytes    = 64 << 20
	DefaultSenderRate        = 10
	DefaultSenderBurst       = 200
)

// heldFor bounds how long an admitted message is counted while the cache
// does not show it: one that was created and deleted before the cache saw
// it is never shown.
const heldFor = time.Minute

// messageLimits are the bounds a call's messages must fit; a bound of 0 or
// less is none.
type messageLimits struct {
	// queue bounds the messages waiting for one member, queuePerSender
	// one sender's share of them.
	queue, queuePerSender int
	// keptMessages and keptBytes bound what one sender keeps in a
	// namespace: its Delegations until they are deleted, and their bytes.
	keptMessages int
	keptBytes    int64
}

// outgoing is one message a call would send.
type outgoing struct {
	to    string
	bytes int64
}

// messageUsage is what a sender and the receivers of a call hold already.
type messageUsage struct {
	keptMessages int
	keptBytes    int64
	// queued and queuedFromSender count the messages waiting for each
	// receiver: all of them, and the sender's.
	queued, queuedFromSender map[string]int
}

// admitMessages decides whether a sender with usage u may send out within
// l: all of them, or none.
func admitMessages(l messageLimits, u messageUsage, out []outgoing, namespace string) *toolerr.Error {
	var bytes int64
	for _, o := range out {
		bytes += o.bytes
	}
	if l.keptMessages > 0 && u.keptMessages+len(out) > l.keptMessages {
		return toolerr.New(toolerr.SenderLimit,
			"you keep %d messages in namespace %s and this call would send %d more; one sender keeps at most %d. A message is kept until retention deletes it after it settled: collect outcomes with bridge_poll and bridge_ack, and send again once settled ones are gone; nothing was sent",
			u.keptMessages, namespace, len(out), l.keptMessages)
	}
	if l.keptBytes > 0 && u.keptBytes+bytes > l.keptBytes {
		return toolerr.New(toolerr.SenderLimit,
			"your messages in namespace %s hold %d bytes (content and images) and this call would add %d; one sender keeps at most %d. A message is kept until retention deletes it after it settled: send less, or again once settled ones are gone; nothing was sent",
			namespace, u.keptBytes, bytes, l.keptBytes)
	}
	adding := map[string]int{}
	for _, o := range out {
		adding[o.to]++
	}
	for _, o := range out {
		n := adding[o.to]
		if l.queue > 0 && u.queued[o.to]+n > l.queue {
			return toolerr.New(toolerr.QueueFull,
				"member %s already has %d messages waiting, the most its queue holds; nothing was sent. Send again once some were delivered (bridge_status shows its queue depth), or to another member",
				o.to, u.queued[o.to])
		}
		if l.queuePerSender > 0 && u.queuedFromSender[o.to]+n > l.queuePerSender {
			return toolerr.New(toolerr.QueueFull,
				"%d of the messages waiting for member %s are yours, the most one sender may queue to one member (%d), so that other senders still reach it; nothing was sent. Send again once some of yours were delivered",
				u.queuedFromSender[o.to], o.to, l.queuePerSender)
		}
	}
	return nil
}

// heldMessage is a message this replica admitted that the cache may not
// show yet.
type heldMessage struct {
	namespace, sender, to string
	bytes                 int64
	// name is the message's, given at admission; createdAt is set once
	// it was created.
	name      string
	createdAt time.Time
}

// messageLedger admits messages, one call at a time, and holds the ones it
// admitted until the cache shows them.
type messageLedger struct {
	mu   sync.Mutex
	held map[*heldMessage]struct{}
	// leaving are the closed messages the cache dropped that the closed
	// view may not show yet (closed.go).
	leaving map[types.NamespacedName]leavingMessage
	rates   senderRates
}

// admission is the messages one call was admitted to send, held until
// each is created (created) or given up (release).
type admission struct {
	ledger *messageLedger
	held   []*heldMessage
}

// created records that the i-th message was created as name at now: it is
// counted until the cache shows it.
func (a *admission) created(i int, name string, now time.Time) {
	a.ledger.mu.Lock()
	defer a.ledger.mu.Unlock()
	a.held[i].name, a.held[i].createdAt = name, now
}

// renamed records that the i-th message is to be created as name, its
// first name being another message's.
func (a *admission) renamed(i int, name string) {
	a.ledger.mu.Lock()
	defer a.ledger.mu.Unlock()
	a.held[i].name = name
}

// release stops counting the messages that were not created.
func (a *admission) release() {
	a.ledger.mu.Lock()
	defer a.ledger.mu.Unlock()
	for _, h := range a.held {
		if h.createdAt.IsZero() {
			delete(a.ledger.held, h)
		}
	}
}

// admitDelegations admits ds, the messages one call of p sends, within the
// bounds and p's rate, or refuses them all. The caller creates the
// admitted ones, calls created for each and release at the end.
func (s *service) admitDelegations(ctx context.Context, p *identity.Principal, ds []*fleetv1alpha1.Delegation) (*admission, error) {
	l := &s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	now := s.opts.Clock.Now()
	if err := s.forgetShown(ctx, now); err != nil {
		return nil, err
	}
	s.forgetLeft(now)
	sender := p.Key()
	out := make([]outgoing, len(ds))
	for i, d := range ds {
		out[i] = outgoing{to: d.Spec.To, bytes: delegation.Bytes(d)}
	}
	u, err := s.messageUsage(ctx, p.Namespace, p.API(), out)
	if err != nil {
		return nil, err
	}
	if terr := admitMessages(s.opts.messageLimits(), u, out, p.Namespace); terr != nil {
		return nil, terr
	}
	if terr := l.rates.take(sender, now, len(ds), s.opts.SenderRate, s.opts.SenderBurst); terr != nil {
		return nil, terr
	}
	a := &admission{ledger: l}
	if l.held == nil {
		l.held = map[*heldMessage]struct{}{}
	}
	for i, o := range out {
		nameMessage(ds[i])
		h := &heldMessage{namespace: p.Namespace, sender: sender, to: o.to, bytes: o.bytes, name: ds[i].Name}
		l.held[h] = struct{}{}
		a.held = append(a.held, h)
	}
	return a, nil
}

// nameMessage gives d a name of its generateName's, as the API server
// would (five random characters), so that the name is known before d is
// created.
func nameMessage(d *fleetv1alpha1.Delegation) {
	if d.Name == "" && d.GenerateName != "" {
		d.Name = generateName(d.GenerateName)
	}
}

// generateName is a name of prefix's as the API server generates one: the
// prefix, cut to leave room, and five random characters.
func generateName(prefix string) string {
	const random, maxName = 5, 63
	if len(prefix) > maxName-random {
		prefix = prefix[:maxName-random]
	}
	return prefix + utilrand.String(random)
}

// forgetShown stops holding the created messages the cache or the closed
// view shows (one may close before this looks), and those held longer than
// heldFor. The ledger is locked.
func (s *service) forgetShown(ctx context.Context, now time.Time) error {
	for h := range s.ledger.held {
		if h.createdAt.IsZero() {
			continue
		}
		if now.Sub(h.createdAt) > heldFor {
			delete(s.ledger.held, h)
			continue
		}
		var d fleetv1alpha1.Delegation
		err := s.cache.Get(ctx, client.ObjectKey{Namespace: h.namespace, Name: h.name}, &d, &client.GetOptions{UnsafeDisableDeepCopy: ptrTrue})
		switch {
		case err == nil:
			delete(s.ledger.held, h)
		case client.IgnoreNotFound(err) != nil:
			return fmt.Errorf("reading delegation %s/%s: %w", h.namespace, h.name, err)
		case s.closedShows(types.NamespacedName{Namespace: h.namespace, Name: h.name}):
			delete(s.ledger.held, h)
		}
	}
	return nil
}

// ptrTrue is a *bool that is true, for list and get options.
var ptrTrue = func() *bool { b := true; return &b }()

// messageUsage counts what from keeps in namespace and what waits for the
// receivers of out: the cache, the closed view, the closed messages leaving
// the one for the other, and the messages held that the cache's lists did
// not show (each list by itself: the cache may show a message between two
// of them). The ledger is locked.
func (s *service) messageUsage(ctx context.Context, namespace string, from fleetv1alpha1.Principal, out []outgoing) (messageUsage, error) {
	sender := identity.Key(from)
	u := messageUsage{queued: map[string]int{}, queuedFromSender: map[string]int{}}
	keptShown, queuedShown := map[string]bool{}, map[string]bool{}
	l := s.opts.messageLimits()
	if l.keptMessages > 0 || l.keptBytes > 0 {
		// Read in place: a sender may keep many large messages, and nothing
		// here changes them.
		var kept fleetv1alpha1.DelegationList
		if err := s.cache.List(ctx, &kept, client.InNamespace(namespace), client.MatchingFields{indexSender: sender}, client.UnsafeDisableDeepCopy); err != nil {
			return u, fmt.Errorf("listing the messages of %s in %s: %w", sender, namespace, err)
		}
		u.keptMessages = len(kept.Items)
		for i := range kept.Items {
			u.keptBytes += delegation.Bytes(&kept.Items[i])
			keptShown[kept.Items[i].Name] = true
		}
		// Where the cache holds closed messages too, each counts once.
		s.closedKept(namespace, from, func(name string, bytes int64) {
			if !keptShown[name] {
				keptShown[name] = true
				u.keptMessages++
				u.keptBytes += bytes
			}
		})
		for key, m := range s.ledger.leaving {
			if key.Namespace == namespace && m.sender == sender && !keptShown[key.Name] {
				keptShown[key.Name] = true
				u.keptMessages++
				u.keptBytes += m.bytes
			}
		}
	}
	if l.queue > 0 || l.queuePerSender > 0 {
		for _, o := range out {
			if _, done := u.queued[o.to]; done {
				continue
			}
			var queued fleetv1alpha1.DelegationList
			if err := s.cache.List(ctx, &queued, client.InNamespace(namespace), client.MatchingFields{indexReceiverState: indexValue(stateQueued, o.to)}, client.UnsafeDisableDeepCopy); err != nil {
				return u, fmt.Errorf("listing delegations to %s/%s: %w", namespace, o.to, err)
			}
			u.queued[o.to] = len(queued.Items)
			for i := range queued.Items {
				queuedShown[queued.Items[i].Name] = true
				if identity.Key(queued.Items[i].Spec.From) == sender {
					u.queuedFromSender[o.to]++
				}
			}
		}
	}
	for h := range s.ledger.held {
		if h.namespace != namespace {
			continue
		}
		if h.sender == sender && !keptShown[h.name] {
			u.keptMessages++
			u.keptBytes += h.bytes
		}
		if _, counted := u.queued[h.to]; counted && !queuedShown[h.name] {
			u.queued[h.to]++
			if h.sender == sender {
				u.queuedFromSender[h.to]++
			}
		}
	}
	return u, nil
}

// messageLimits are the message bounds o sets.
func (o Options) messageLimits() messageLimits {
	return messageLimits{queue: o.MaxQueue, queuePerSender: o.MaxQueuePerSender, keptMessages: o.MaxSenderMessages, keptBytes: o.MaxSenderBytes}
}

// senderRates are the principals' token buckets. An idle principal's
// bucket is full, and forgotten once many principals have one.
type senderRates struct {
	by map[string]*rate.Limiter
}

// maxIdleRates is how many buckets are kept before full ones are forgotten.
const maxIdleRates = 4096

// take takes n messages from sender's bucket at now (perSecond a second,
// burst at once), or refuses them with rate_limited saying when they would
// fit. A rate of 0 or less is no bound.
func (r *senderRates) take(sender string, now time.Time, n int, perSecond float64, burst int) *toolerr.Error {
	if perSecond <= 0 || n == 0 {
		return nil
	}
	burst = max(burst, 1)
	if n > burst {
		return toolerr.New(toolerr.RateLimited, "this call sends %d messages, and one sender sends at most %d at once; send to fewer members per call", n, burst)
	}
	if r.by == nil {
		r.by = map[string]*rate.Limiter{}
	}
	lim := r.by[sender]
	if lim == nil {
		if len(r.by) >= maxIdleRates {
			for k, l := range r.by {
				if l.TokensAt(now) >= float64(l.Burst()) {
					delete(r.by, k)
				}
			}
		}
		lim = rate.NewLimiter(rate.Limit(perSecond), burst)
		r.by[sender] = lim
	}
	if lim.AllowN(now, n) {
		return nil
	}
	wait := time.Duration(math.Ceil((float64(n)-lim.TokensAt(now))/perSecond*1000)) * time.Millisecond
	return toolerr.New(toolerr.RateLimited, "you send messages faster than the %g a second (%d at once) one sender may; nothing was sent. Send again in %s",
		perSecond, burst, wait)
}

// indexSender indexes Delegations by identity.Key(spec.from), whatever
// their state: what a sender keeps.
const indexSender = "gateway.fleetd.dev/sender"

// indexSenderFunc indexes a Delegation by its sender.
func indexSenderFunc(o client.Object) []string {
	d, ok := o.(*fleetv1alpha1.Delegation)
	if !ok || d.Spec.From.Name == "" {
		return nil
	}
	return []string{identity.Key(d.Spec.From)}
}
