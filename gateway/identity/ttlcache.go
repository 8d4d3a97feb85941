package identity

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ttlCache is a small map whose entries expire.
type ttlCache[V any] struct {
	clock   clock.PassiveClock
	mu      sync.Mutex
	entries map[string]ttlEntry[V]
}

type ttlEntry[V any] struct {
	value   V
	expires time.Time
}

func newTTLCache[V any](c clock.PassiveClock) *ttlCache[V] {
	return &ttlCache[V]{clock: c, entries: make(map[string]ttlEntry[V])}
}

func (c *ttlCache[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !c.clock.Now().Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.value, true
}

func (c *ttlCache[V]) put(key string, v V, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if len(c.entries) >= reviewCacheSize {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= reviewCacheSize {
			clear(c.entries)
		}
	}
	c.entries[key] = ttlEntry[V]{value: v, expires: now.Add(ttl)}
}
