package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/gateway/toolerr"
)

func TestAdmitMessages(t *testing.T) {
	limits := messageLimits{queue: 10, queuePerSender: 4, keptMessages: 20, keptBytes: 1000}
	cases := map[string]struct {
		usage    messageUsage
		out      []outgoing
		wantCode toolerr.Code
		wantText string
	}{
		"room for everything": {
			usage: messageUsage{keptMessages: 19, keptBytes: 900, queued: map[string]int{"w1": 9}, queuedFromSender: map[string]int{"w1": 3}},
			out:   []outgoing{{to: "w1", bytes: 100}},
		},
		"kept messages at the bound": {
			usage:    messageUsage{keptMessages: 20},
			out:      []outgoing{{to: "w1", bytes: 1}},
			wantCode: toolerr.SenderLimit, wantText: "you keep 20 messages",
		},
		"a broadcast that would pass the kept messages": {
			usage:    messageUsage{keptMessages: 18},
			out:      []outgoing{{to: "a"}, {to: "b"}, {to: "c"}},
			wantCode: toolerr.SenderLimit, wantText: "would send 3 more",
		},
		"kept bytes": {
			usage:    messageUsage{keptMessages: 1, keptBytes: 990},
			out:      []outgoing{{to: "w1", bytes: 11}},
			wantCode: toolerr.SenderLimit, wantText: "hold 990 bytes",
		},
		"the member's queue is full": {
			usage:    messageUsage{queued: map[string]int{"w1": 10}},
			out:      []outgoing{{to: "w1"}},
			wantCode: toolerr.QueueFull, wantText: "member w1 already has 10 messages waiting",
		},
		"the sender's share of the queue is used": {
			usage:    messageUsage{queued: map[string]int{"w1": 4}, queuedFromSender: map[string]int{"w1": 4}},
			out:      []outgoing{{to: "w1"}},
			wantCode: toolerr.QueueFull, wantText: "4 of the messages waiting for member w1 are yours",
		},
		"another sender's messages leave the share free": {
			usage: messageUsage{queued: map[string]int{"w1": 6}, queuedFromSender: map[string]int{"w1": 0}},
			out:   []outgoing{{to: "w1"}, {to: "w1"}, {to: "w1"}, {to: "w1"}},
		},
		"one call's messages to one member count together": {
			usage:    messageUsage{queued: map[string]int{"w1": 8}},
			out:      []outgoing{{to: "w1"}, {to: "w1"}, {to: "w1"}},
			wantCode: toolerr.QueueFull,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := admitMessages(limits, tc.usage, tc.out, "ns")
			var code toolerr.Code
			if got != nil {
				code = got.Code
			}
			if diff := cmp.Diff(tc.wantCode, code); diff != "" {
				t.Fatalf("code (-want +got):\n%s\n%v", diff, got)
			}
			if got != nil && !strings.Contains(got.Message, tc.wantText) {
				t.Errorf("message %q does not say %q", got.Message, tc.wantText)
			}
		})
	}
	if got := admitMessages(messageLimits{}, messageUsage{keptMessages: 1 << 20, keptBytes: 1 << 40}, []outgoing{{to: "w1"}}, "ns"); got != nil {
		t.Errorf("no bounds refused: %v", got)
	}
}

func TestSenderRates(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type take struct {
		at     time.Duration
		sender string
		n      int
		want   toolerr.Code
	}
	cases := map[string][]take{
		"a burst, then one a second": {
			{0, "a", 3, ""},
			{0, "a", 1, toolerr.RateLimited},
			{999 * time.Millisecond, "a", 1, toolerr.RateLimited},
			{time.Second, "a", 1, ""},
			{time.Second, "a", 1, toolerr.RateLimited},
		},
		"each sender has a bucket of its own": {
			{0, "a", 3, ""},
			{0, "b", 3, ""},
			{0, "a", 1, toolerr.RateLimited},
		},
		"more at once than the burst is never allowed": {
			{time.Hour, "a", 4, toolerr.RateLimited},
		},
	}
	for name, takes := range cases {
		t.Run(name, func(t *testing.T) {
			var r senderRates
			for i, tk := range takes {
				got := r.take(tk.sender, start.Add(tk.at), tk.n, 1, 3)
				var code toolerr.Code
				if got != nil {
					code = got.Code
				}
				if code != tk.want {
					t.Fatalf("take %d (%s, %d at %s): %q, want %q (%v)", i, tk.sender, tk.n, tk.at, code, tk.want, got)
				}
			}
		})
	}
	var r senderRates
	if got := r.take("a", start, 1000, -1, 1); got != nil {
		t.Errorf("no rate refused: %v", got)
	}
}
