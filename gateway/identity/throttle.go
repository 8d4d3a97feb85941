package identity

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Defaults of the failed-authentication throttle.
const (
	// DefaultFailureBurst is how many authentications one source may fail
	// before it is throttled.
	DefaultFailureBurst = 20
	// DefaultFailureInterval is how often a throttled source may try
	// once more.
	DefaultFailureInterval = time.Second
	// maxThrottledSources bounds the sources the throttle remembers; past
	// it, new sources share one bucket.
	maxThrottledSources = 1 << 16
)

// overflowSource is the bucket of the sources that found the throttle
// full.
const overflowSource = "\x00overflow"

// failureThrottle bounds failed authentications per source (a client
// address) with a token bucket each. An attempt that may fail takes a
// token before it is checked and a success gives it back, so however many
// attempts one source makes at once, at most burst of them reach a
// TokenReview before the bucket refills: the bound holds under
// concurrency, not only after failures were counted.
type failureThrottle struct {
	clock clock.PassiveClock
	burst float64
	every time.Duration

	mu      sync.Mutex
	sources map[string]*failureBucket
}

type failureBucket struct {
	tokens float64
	at     time.Time
}

func newFailureThrottle(c clock.PassiveClock, burst int, every time.Duration) *failureThrottle {
	return &failureThrottle{clock: c, burst: float64(burst), every: every, sources: map[string]*failureBucket{}}
}

// take reserves an attempt for source; ok is false when source is
// throttled. refund gives the attempt back (it succeeded); calling it more
// than once is harmless. An empty source, or a throttle with a burst
// that is not positive, is not throttled.
func (t *failureThrottle) take(source string) (refund func(), ok bool) {
	if t == nil || source == "" || t.burst <= 0 {
		return func() {}, true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	b := t.bucket(source, now)
	t.refill(b, now)
	if b.tokens < 1 {
		return nil, false
	}
	b.tokens--
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			b.tokens = min(b.tokens+1, t.burst)
		})
	}, true
}

// bucket is source's bucket, made full when it is new.
func (t *failureThrottle) bucket(source string, now time.Time) *failureBucket {
	if b, ok := t.sources[source]; ok {
		return b
	}
	if len(t.sources) >= maxThrottledSources {
		// A full bucket is what a new source gets: forgetting it loses
		// nothing.
		for k, b := range t.sources {
			if t.refill(b, now); b.tokens >= t.burst {
				delete(t.sources, k)
			}
		}
		if len(t.sources) >= maxThrottledSources {
			source = overflowSource
			if b, ok := t.sources[source]; ok {
				return b
			}
		}
	}
	b := &failureBucket{tokens: t.burst, at: now}
	t.sources[source] = b
	return b
}

func (t *failureThrottle) refill(b *failureBucket, now time.Time) {
	if t.every <= 0 {
		b.tokens, b.at = t.burst, now
		return
	}
	if gained := float64(now.Sub(b.at)) / float64(t.every); gained > 0 {
		b.tokens = min(b.tokens+gained, t.burst)
		b.at = now
	}
}
