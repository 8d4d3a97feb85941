package textcut

import (
	"testing"
	"unicode/utf8"
)

func TestHeadAndTail(t *testing.T) {
	cases := map[string]struct {
		s          string
		n          int
		head, tail string
	}{
		"fits":                  {s: "abc", n: 3, head: "abc", tail: "abc"},
		"longer than needed":    {s: "abc", n: 10, head: "abc", tail: "abc"},
		"ascii":                 {s: "abcdef", n: 2, head: "ab", tail: "ef"},
		"zero":                  {s: "abc", n: 0, head: "", tail: ""},
		"negative":              {s: "abc", n: -1, head: "", tail: ""},
		"inside a character":    {s: "aé", n: 2, head: "a", tail: "é"},
		"inside a wide one":     {s: "x🦀y", n: 3, head: "x", tail: "y"},
		"wide one fits exactly": {s: "x🦀y", n: 5, head: "x🦀", tail: "🦀y"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Head(tc.s, tc.n); got != tc.head {
				t.Errorf("Head(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.head)
			}
			if got := Tail(tc.s, tc.n); got != tc.tail {
				t.Errorf("Tail(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.tail)
			}
		})
	}
}

func FuzzCutsStayValid(f *testing.F) {
	f.Add("héllo wörld 🦀", 5)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if !utf8.ValidString(s) {
			return
		}
		for _, got := range []string{Head(s, n), Tail(s, n)} {
			if !utf8.ValidString(got) || len(got) > max(n, 0) && len(got) > 0 && n < len(s) {
				t.Fatalf("cut of %q at %d gave %q", s, n, got)
			}
		}
	})
}
