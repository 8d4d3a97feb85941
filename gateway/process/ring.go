package process

import "sync"

// ring keeps the last bytes written to it.
type ring struct {
	mu    sync.Mutex
	buf   []byte
	next  int
	total int64
}

func newRing(size int) *ring { return &ring{buf: make([]byte, size)} }

// Write implements io.Writer; it never fails.
func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	r.total += int64(n)
	if len(p) > len(r.buf) {
		p = p[len(p)-len(r.buf):]
	}
	for len(p) > 0 {
		c := copy(r.buf[r.next:], p)
		p = p[c:]
		r.next = (r.next + c) % len(r.buf)
	}
	return n, nil
}

// tail returns the last n bytes written (at most the ring's size), and
// whether older output exists that it does not return.
func (r *ring) tail(n int) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var kept []byte
	if r.total >= int64(len(r.buf)) {
		kept = append(append(make([]byte, 0, len(r.buf)), r.buf[r.next:]...), r.buf[:r.next]...)
	} else {
		kept = append([]byte{}, r.buf[:r.next]...)
	}
	if n < len(kept) {
		kept = kept[len(kept)-n:]
	}
	return kept, r.total > int64(len(kept))
}
