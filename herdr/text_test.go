package herdr

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPlainText(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"plain text is kept exactly": {
			in:   "say \"hi\" and 'bye'; $(rm -rf /) `id` ${HOME} \\n — naïve 日本語 🚀\n\tindented",
			want: "say \"hi\" and 'bye'; $(rm -rf /) `id` ${HOME} \\n — naïve 日本語 🚀\n\tindented",
		},
		"end of paste and submit":   {in: "part one\x1b[201~\rpart two", want: "part one␛[201~\npart two"},
		"interrupt":                 {in: "hello\x03world", want: "hello␃world"},
		"CRLF is one line break":    {in: "a\r\nb\rc", want: "a\nb\nc"},
		"other C0 controls and DEL": {in: "\x00\x07\x08\x1f\x7f", want: "␀␇␈␟␡"},
		"C1 controls":               {in: "a\u009b31mb\u0085", want: "a\uFFFD31mb\uFFFD"},
		"bytes that are not UTF-8":  {in: "a\xff\x9b[2Jb", want: "a\uFFFD\uFFFD[2Jb"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := PlainText(tc.in); got != tc.want {
				t.Errorf("PlainText(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzPlainText: whatever goes in, nothing that drives a terminal comes
// out, and text that had nothing to neutralise comes out unchanged.
func FuzzPlainText(f *testing.F) {
	for _, seed := range []string{"", "hello", "x\x1b[201~\ry", "\x03", "a\r\n", "\xc2\x9b", "\xff", "日本\x7f"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := PlainText(in)
		if !utf8.ValidString(out) {
			t.Fatalf("PlainText(%q) = %q is not UTF-8", in, out)
		}
		for _, r := range out {
			if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) {
				t.Fatalf("PlainText(%q) = %q holds control %U", in, out, r)
			}
		}
		if strings.ContainsAny(out, "\x1b\r\x03") {
			t.Fatalf("PlainText(%q) = %q holds ESC, CR or ^C", in, out)
		}
		if isPlain(in) && out != in {
			t.Fatalf("PlainText(%q) = %q changed plain text", in, out)
		}
		if PlainText(out) != out {
			t.Fatalf("PlainText is not idempotent on %q", in)
		}
	})
}

func TestReadableText(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"plain":               {"hello\n\tworld", "hello\n\tworld"},
		"colours":             {"\x1b[1;31mred\x1b[0m text", "red text"},
		"a title":             {"\x1b]0;my title\x07after", "after"},
		"a title ended by ST": {"\x1b]2;t\x1b\\after", "after"},
		"two-byte escapes":    {"a\x1b=b\x1b>c", "abc"},
		"CR LF and a lone CR": {"one\r\ntwo\rthree", "one\ntwo\nthree"},
		"other controls":      {"bell\x07 nul\x00 del\x7f", "bell nul del"},
		"C1 and bad bytes":    {"a\u0085b\xffc", "abc"},
		"cut escape":          {"x\x1b[31", "x"},
		"unicode stays":       {"❯ done — ok", "❯ done — ok"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ReadableText(tc.in); got != tc.want {
				t.Errorf("ReadableText(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
