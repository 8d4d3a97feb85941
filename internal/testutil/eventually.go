package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond every interval until it holds, and fails the test
// with cond's last description of what it saw once timeout passes.
// Timeouts are generous: they catch a hang, not slowness.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() (ok bool, seen string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		time.Sleep(interval)
	}
	t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, last)
}
