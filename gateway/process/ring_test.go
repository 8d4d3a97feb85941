package process

import (
	"strings"
	"testing"
)

func TestRing(t *testing.T) {
	cases := map[string]struct {
		writes        []string
		n             int
		want          string
		wantTruncated bool
	}{
		"empty":            {n: 8, want: ""},
		"fits":             {writes: []string{"ab", "cd"}, n: 8, want: "abcd"},
		"tail of it":       {writes: []string{"abcd"}, n: 2, want: "cd", wantTruncated: true},
		"wraps":            {writes: []string{"abcdef", "ghij"}, n: 8, want: "cdefghij", wantTruncated: true},
		"exactly full":     {writes: []string{"abcdefgh"}, n: 8, want: "abcdefgh"},
		"larger than ring": {writes: []string{"0123456789abc"}, n: 8, want: "56789abc", wantTruncated: true},
		"many small":       {writes: strings.Split("abcdefghijklmnop", ""), n: 8, want: "ijklmnop", wantTruncated: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRing(8)
			for _, w := range tc.writes {
				if n, err := r.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			got, truncated := r.tail(tc.n)
			if string(got) != tc.want || truncated != tc.wantTruncated {
				t.Errorf("tail(%d) = %q, %v; want %q, %v", tc.n, got, truncated, tc.want, tc.wantTruncated)
			}
		})
	}
}
