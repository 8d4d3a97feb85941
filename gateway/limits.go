package gateway

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/tracing"
)

// The limits no caller talks the gateway past: how long a chain of
// messages may grow (Options.MaxHops), how many members one principal may
// have spawned and one namespace may hold (MaxSpawns, MaxMembers), and the
// bounds on the messages a sender keeps and queues (message_bounds.go).
//
// Spawns are counted on the API server, and a namespace's count and create
// run one at a time on a replica, so a thousand spawns at once on one
// replica never pass the bounds. Replicas do not share that lock: N
// replicas may together pass a spawn bound by at most N-1. A ResourceQuota
// on count/members.fleet.fleetd.dev (config/quota) is the API server's
// exact bound beneath every replica, and its refusal is quota_exceeded.

// Defaults of the limits.
const (
	DefaultMaxQueue   = 100
	DefaultMaxSpawns  = 16
	DefaultMaxMembers = 256
)

// chain makes d, sent by a member, one hop further than the message the
// member works on (spec.hops, and the sent-while annotation that links
// them), and refuses it once the chain would be longer than MaxHops,
// naming the chain. Two members that forward every message to each other
// end there, and so does a member that sends while it answers a message
// that came the same way.
func (s *service) chain(ctx context.Context, p *identity.Principal, d *fleetv1alpha1.Delegation) error {
	if p.Kind != fleetv1alpha1.PrincipalMember {
		return nil
	}
	active, err := s.delegationsTo(ctx, p.Namespace, p.Name, stateActive)
	if err != nil {
		return err
	}
	parent := currentDelegation(active)
	if parent == nil {
		return nil
	}
	d.Spec.Hops = parent.Spec.Hops + 1
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[fleetv1alpha1.AnnotationSentWhile] = parent.Name
	if sc := tracing.SpanContext(parent); sc.IsValid() {
		// A message sent while working on another starts a trace of its
		// own, linked to the one it came from.
		trace.SpanFromContext(ctx).AddLink(trace.Link{SpanContext: sc})
	}
	if d.Spec.Hops <= s.opts.MaxHops {
		return nil
	}
	return toolerr.New(toolerr.HopLimit,
		"this message would be hop %d of one chain of messages, and at most %d are allowed: %s -> %s. A member's message sent while it works on one is a hop further than that one; answer the message you work on with bridge_reply instead of passing it on",
		d.Spec.Hops, s.opts.MaxHops, s.describeChain(ctx, parent), d.Spec.To)
}

// chainShown bounds the links describeChain names at either end.
const chainShown = 4

// describeChain is the chain of messages that led to d, oldest first, as
// "sender -> receiver (message)" links: followed back through the
// messages each was sent while working on, and the replies carried back.
func (s *service) describeChain(ctx context.Context, d *fleetv1alpha1.Delegation) string {
	var links []string
	seen := sets.New[string]()
	for d != nil && !seen.Has(d.Name) && len(seen) <= int(s.opts.MaxHops)+1 {
		seen.Insert(d.Name)
		links = append(links, fmt.Sprintf("%s -> %s (%s)", d.Spec.From.Name, d.Spec.To, d.Name))
		up := d.Annotations[fleetv1alpha1.AnnotationSentWhile]
		if up == "" {
			up = d.Spec.InReplyTo
		}
		if up == "" {
			break
		}
		var err error
		if d, err = s.getDelegation(ctx, types.NamespacedName{Namespace: d.Namespace, Name: up}); err != nil {
			break
		}
	}
	slices.Reverse(links)
	if len(links) > 2*chainShown {
		links = append(append(links[:chainShown:chainShown], fmt.Sprintf("... %d more", len(links)-2*chainShown)), links[len(links)-chainShown:]...)
	}
	return strings.Join(links, ", ")
}

// roomToSpawn refuses a spawn by p once p, or any principal that spawned
// p, has MaxSpawns members: the members it spawned, those they spawned in
// turn, and a lead's team. Every member spawned counts against its
// spawner's spawner too, so a member cannot pass its spawner's bound by
// spawning members that spawn. The namespace holds MaxMembers at most.
func (s *service) roomToSpawn(ctx context.Context, p *identity.Principal) error {
	if s.opts.MaxSpawns <= 0 && s.opts.MaxMembers <= 0 {
		return nil
	}
	// Read on the API server: spawns are rare, and a caller's spawn right
	// after its last would not be in the cache yet.
	var list fleetv1alpha1.MemberList
	if err := s.live.List(ctx, &list, client.InNamespace(p.Namespace)); err != nil {
		return fmt.Errorf("listing members in %s: %w", p.Namespace, err)
	}
	members := slices.DeleteFunc(list.Items, func(m fleetv1alpha1.Member) bool { return m.DeletionTimestamp != nil })
	if s.opts.MaxMembers > 0 && len(members) >= s.opts.MaxMembers {
		return toolerr.New(toolerr.SpawnLimit,
			"namespace %s has %d members, the most the gateway starts members up to; stop some (bridge_stop) before you spawn more", p.Namespace, len(members))
	}
	if s.opts.MaxSpawns <= 0 {
		return nil
	}
	spawned := map[string][]*fleetv1alpha1.Member{}
	byName := map[string]*fleetv1alpha1.Member{}
	for i := range members {
		m := &members[i]
		byName[m.Name] = m
		if by := m.Annotations[fleetv1alpha1.AnnotationSpawnedBy]; by != "" {
			spawned[by] = append(spawned[by], m)
		}
	}
	// The members key answers for: spawned by it or by its members, and
	// its team when it (lead) leads one.
	answersFor := func(key string, lead *fleetv1alpha1.Member) sets.Set[string] {
		own := sets.New[string]()
		next := []string{key}
		for len(next) > 0 {
			k := next[0]
			next = next[1:]
			for _, m := range spawned[k] {
				if !own.Has(m.Name) {
					own.Insert(m.Name)
					next = append(next, identity.Key(fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: m.Name}))
				}
			}
		}
		if lead != nil && lead.Spec.Role == fleetv1alpha1.RoleLead && lead.Spec.Team != "" {
			for _, m := range members {
				if m.Spec.Team == lead.Spec.Team && m.Name != lead.Name {
					own.Insert(m.Name)
				}
			}
		}
		return own
	}
	// p, then whoever spawned p, and so on up.
	memberKey := func(name string) string {
		return identity.Key(fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: name})
	}
	key := p.Key()
	var self *fleetv1alpha1.Member
	if p.Kind == fleetv1alpha1.PrincipalMember {
		self = byName[p.Name]
	}
	for visited := sets.New[string](); key != "" && !visited.Has(key); {
		visited.Insert(key)
		if n := answersFor(key, self).Len(); n >= s.opts.MaxSpawns {
			who := "you have"
			if key != p.Key() {
				who = key + ", which spawned you or a member that spawned you, has"
			}
			return toolerr.New(toolerr.SpawnLimit,
				"%s %d members (spawned by it, by those it spawned, or in the team it leads), the most one principal may; stop some (bridge_stop) before you spawn more", who, n)
		}
		key = ""
		if self != nil {
			key = self.Annotations[fleetv1alpha1.AnnotationSpawnedBy]
		}
		self = nil
		if name, ok := strings.CutPrefix(key, memberKey("")); ok {
			self = byName[name]
		}
	}
	return nil
}

// quotaRefusal is err, or, when a ResourceQuota refused what, a
// quota_exceeded error that says so.
func quotaRefusal(err error, what string) error {
	if !toolerr.IsQuotaExceeded(err) {
		return err
	}
	return toolerr.New(toolerr.QuotaExceeded,
		"the API server refused the %s: a ResourceQuota of the namespace is used up (%v); ask its administrator, or wait for settled ones to go", what, err)
}

// stripedLocks is a fixed set of mutexes, one picked by a key's hash: a
// lock per key without a map that grows with every key ever seen. Two keys
// may share a mutex, which only serialises them.
type stripedLocks [64]sync.Mutex

// stripeSeed hashes keys onto stripes.
var stripeSeed = maphash.MakeSeed()

// lock locks key's mutex and returns its unlock.
func (l *stripedLocks) lock(key string) (unlock func()) {
	mu := &l[maphash.String(stripeSeed, key)%uint64(len(l))]
	mu.Lock()
	return mu.Unlock
}
