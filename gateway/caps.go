package gateway

import (
	"sync"

	"github.com/fleetd/fleetd/gateway/identity"
)

// Defaults of the per-principal caps in Options.
const (
	// DefaultMaxHeldCalls is how many calls one principal may hold open
	// at once: as many as a member's queue holds messages.
	DefaultMaxHeldCalls = 100
	// DefaultMaxDashboardStreams is how many dashboard streams one
	// principal may keep open at once: a fleet view and a member page in
	// each of a few tabs.
	DefaultMaxDashboardStreams = 16
)

// principalSlots bounds what each principal holds open at once (held
// calls, dashboard streams). A slot is reserved before the thing it
// stands for is made and released when it ends, under one lock, so the
// bound holds however many calls arrive at the same moment.
type principalSlots struct {
	// max is the bound per principal; not positive: no bound.
	max  int
	mu   sync.Mutex
	held map[string]int
}

func newPrincipalSlots(max int) *principalSlots {
	return &principalSlots{max: max, held: map[string]int{}}
}

// slotKey names a principal across namespaces: two namespaces may each
// have a member of the same name.
func slotKey(p *identity.Principal) string { return p.Namespace + "/" + p.Key() }

// reserve takes a slot for p; ok is false when p holds as many as it may.
// release gives the slot back; calling it more than once is harmless.
func (s *principalSlots) reserve(p *identity.Principal) (release func(), ok bool) {
	key := slotKey(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max > 0 && s.held[key] >= s.max {
		return nil, false
	}
	s.held[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.held[key]--; s.held[key] <= 0 {
				delete(s.held, key)
			}
		})
	}, true
}

// count is how many slots p holds now.
func (s *principalSlots) count(p *identity.Principal) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[slotKey(p)]
}
