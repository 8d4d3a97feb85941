package paneserver

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/herdr"
)

func TestTerminalRead(t *testing.T) {
	three := 3
	cases := map[string]struct {
		output        string
		source        herdr.ReadSource
		lines         *int
		want          string
		wantTruncated bool
	}{
		"visible text": {
			output: "hello\r\nworld\r\n",
			source: herdr.ReadSourceVisible,
			want:   "hello\nworld",
		},
		"cursor movement places text": {
			output: "\x1b[3;5Hthree\x1b[1;1Hone\x1b[2;3Htwo",
			source: herdr.ReadSourceVisible,
			want:   "one\n  two\n    three",
		},
		"clear screen erases what was there": {
			output: "old stuff\r\nmore\x1b[2J\x1b[Hnew",
			source: herdr.ReadSourceVisible,
			want:   "new",
		},
		"erase in line and overwrite": {
			output: "abcdef\x1b[3G\x1b[KXY",
			source: herdr.ReadSourceVisible,
			want:   "abXY",
		},
		"styles do not show": {
			output: "\x1b[1;31mred\x1b[0m plain",
			source: herdr.ReadSourceVisible,
			want:   "red plain",
		},
		"alternate screen hides the main one": {
			output: "shell\r\n\x1b[?1049hfull app",
			source: herdr.ReadSourceVisible,
			want:   "full app",
		},
		"rows wrap at the width": {
			output: "0123456789abc",
			source: herdr.ReadSourceRecent,
			want:   "0123456789\nabc",
		},
		"unwrapped keeps logical lines": {
			output: "0123456789abc\r\nnext\r\n",
			source: herdr.ReadSourceRecentUnwrapped,
			want:   "0123456789abc\nnext",
		},
		"unwrapped applies line editing": {
			output: "$ lss\b\x1b[K -l\r\nout\r\n",
			source: herdr.ReadSourceRecentUnwrapped,
			want:   "$ ls -l\nout",
		},
		"recent includes scrollback": {
			output: "1\r\n2\r\n3\r\n4\r\n5\r\n6\r\n7",
			source: herdr.ReadSourceRecent,
			want:   "1\n2\n3\n4\n5\n6\n7",
		},
		"lines keeps the last ones": {
			output:        "1\r\n2\r\n3\r\n4\r\n5\r\n6\r\n7",
			source:        herdr.ReadSourceRecent,
			lines:         &three,
			want:          "5\n6\n7",
			wantTruncated: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			term := newTerminal(10, 4, 100)
			term.feed([]byte(tc.output))
			got := term.read(tc.source, tc.lines)
			if diff := cmp.Diff(tc.want, got.text); diff != "" {
				t.Errorf("read(%s) mismatch (-want +got):\n%s", tc.source, diff)
			}
			if got.truncated != tc.wantTruncated {
				t.Errorf("read(%s) truncated = %v, want %v", tc.source, got.truncated, tc.wantTruncated)
			}
		})
	}
}

func TestTerminalModes(t *testing.T) {
	cases := map[string]struct {
		output string
		want   inputModes
	}{
		"defaults":                  {output: "", want: inputModes{}},
		"bracketed paste on":        {output: "\x1b[?2004h", want: inputModes{bracketedPaste: true}},
		"bracketed paste on, off":   {output: "\x1b[?2004h\x1b[?2004l", want: inputModes{}},
		"cursor keys application":   {output: "\x1b[?1h", want: inputModes{cursorKeys: true}},
		"split across a write call": {output: "\x1b[?20", want: inputModes{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			term := newTerminal(10, 4, 100)
			term.feed([]byte(tc.output))
			if diff := cmp.Diff(tc.want, term.modes(), cmp.AllowUnexported(inputModes{})); diff != "" {
				t.Errorf("modes mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTerminalAnswersQueries(t *testing.T) {
	term := newTerminal(10, 4, 100)
	done := make(chan string)
	go func() {
		buf := make([]byte, 64)
		n, _ := term.replies().Read(buf)
		done <- string(buf[:n])
	}()
	// A cursor position report request: the emulator answers on its input
	// side, which the pane forwards to the program.
	term.feed([]byte("ab\x1b[6n"))
	if got, want := <-done, "\x1b[1;3R"; got != want {
		t.Errorf("reply to a cursor position request = %q, want %q", got, want)
	}
	term.close()
}
