package rotation

import (
	"slices"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	pol := Policy{QuietAfter: 2 * time.Second, Misses: 2}
	serving := Self{Gated: true, Serving: true, In: true}
	dead := Peer{Name: "b", Ready: true, Known: true, Quiet: 3 * time.Second, Misses: 2}
	for _, tc := range []struct {
		name  string
		self  Self
		peers []Peer
		want  Decision
	}{
		{name: "a Pod without the gate: nothing", self: Self{Serving: true}, peers: []Peer{dead}},
		{name: "serving, not yet in: in", self: Self{Gated: true, Serving: true}, want: Decision{SetIn: true}},
		{name: "in but not serving: nothing, and no judging", self: Self{Gated: true, In: true}, peers: []Peer{dead}},
		{name: "not yet in: no judging", self: Self{Gated: true, Serving: true}, peers: []Peer{dead}, want: Decision{SetIn: true}},
		{name: "quiet and not answering: out", self: serving, peers: []Peer{dead}, want: Decision{TakeOut: []string{"b"}}},
		{name: "quiet, one miss: not yet", self: serving, peers: []Peer{{Name: "b", Ready: true, Known: true, Quiet: 3 * time.Second, Misses: 1}}},
		{name: "not answering but renewing: busy, not dead", self: serving, peers: []Peer{{Name: "b", Ready: true, Known: true, Quiet: time.Second, Misses: 5}}},
		{name: "no Lease seen: unknown, left alone", self: serving, peers: []Peer{{Name: "b", Ready: true, Quiet: time.Hour, Misses: 5}}},
		{name: "already out of the rotation: left alone", self: serving, peers: []Peer{{Name: "b", Known: true, Quiet: time.Hour, Misses: 5}}},
		{
			name: "only the dead of several",
			self: serving,
			peers: []Peer{
				{Name: "b", Ready: true, Known: true},
				{Name: "c", Ready: true, Known: true, Quiet: 3 * time.Second, Misses: 2},
				{Name: "d", Ready: true, Known: true, Quiet: 10 * time.Second, Misses: 3},
			},
			want: Decision{TakeOut: []string{"c", "d"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.self, tc.peers, pol)
			if got.SetIn != tc.want.SetIn || !slices.Equal(got.TakeOut, tc.want.TakeOut) {
				t.Fatalf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSuspect(t *testing.T) {
	pol := Policy{QuietAfter: 2 * time.Second, Misses: 2}
	for _, tc := range []struct {
		p    Peer
		want bool
	}{
		{Peer{Ready: true, Known: true, Quiet: 2 * time.Second}, true},
		{Peer{Ready: true, Known: true, Quiet: 1999 * time.Millisecond}, false},
		{Peer{Ready: false, Known: true, Quiet: time.Hour}, false},
		{Peer{Ready: true, Known: false, Quiet: time.Hour}, false},
	} {
		if got := pol.Suspect(tc.p); got != tc.want {
			t.Errorf("Suspect(%+v) = %v, want %v", tc.p, got, tc.want)
		}
	}
}
