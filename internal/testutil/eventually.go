package testutil

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Defaults of Eventually and Poll. The timeout is generous: it catches a
// hang, not slowness.
const (
	DefaultTimeout  = 90 * time.Second
	DefaultInterval = 20 * time.Millisecond
)

// Condition is what Eventually and Poll wait for: a func that returns nil
// once it holds (and otherwise says what it saw), or one that reports
// whether it holds and what it saw.
type Condition interface {
	func() error | func() (bool, string)
}

// Option changes how long Eventually and Poll wait, or how often they look.
type Option func(*polling)

type polling struct{ timeout, interval time.Duration }

// Within sets the timeout.
func Within(d time.Duration) Option { return func(p *polling) { p.timeout = d } }

// Every sets the interval between looks.
func Every(d time.Duration) Option { return func(p *polling) { p.interval = d } }

// Poll looks at cond until it holds or the timeout passes, and then returns
// an error naming what (which may be empty where cond's own words say it)
// and what cond saw last.
func Poll[C Condition](what string, cond C, opts ...Option) error {
	p := polling{timeout: DefaultTimeout, interval: DefaultInterval}
	for _, o := range opts {
		o(&p)
	}
	check := func() error {
		switch c := any(cond).(type) {
		case func() error:
			return c()
		case func() (bool, string):
			if ok, seen := c(); !ok {
				return errors.New(seen)
			}
			return nil
		}
		panic(fmt.Sprintf("testutil: unsupported condition %T", cond))
	}
	deadline := time.Now().Add(p.timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			if what == "" {
				return fmt.Errorf("timed out after %s; last seen: %w", p.timeout, err)
			}
			return fmt.Errorf("timed out after %s waiting for %s; last seen: %w", p.timeout, what, err)
		}
		time.Sleep(p.interval)
	}
}

// Eventually is Poll that fails the test when the timeout passes.
func Eventually[C Condition](t testing.TB, what string, cond C, opts ...Option) {
	t.Helper()
	if err := Poll(what, cond, opts...); err != nil {
		t.Fatal(err)
	}
}
