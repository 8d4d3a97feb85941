package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// feedAll feeds each chunk to a fresh assembler, as separate reads, and
// collects every event and all echo.
func feedAll(chunks []string) ([]inputEvent, string) {
	var (
		l      lineAssembler
		events []inputEvent
		echo   string
	)
	for _, chunk := range chunks {
		data := []byte(chunk)
		for len(data) > 0 {
			ev, e, n := l.feed(data)
			echo += e
			if ev.Kind != inputNone {
				events = append(events, ev)
			}
			data = data[n:]
		}
	}
	return events, echo
}

func submit(text string) inputEvent { return inputEvent{Kind: inputSubmit, Text: text} }

func TestLineAssembler(t *testing.T) {
	cases := map[string]struct {
		chunks   []string
		want     []inputEvent
		wantEcho string
	}{
		"typed line with CR": {
			chunks:   []string{"hello\r"},
			want:     []inputEvent{submit("hello")},
			wantEcho: "hello\n",
		},
		"line mode with LF": {
			chunks:   []string{"one\ntwo\n"},
			want:     []inputEvent{submit("one"), submit("two")},
			wantEcho: "one\ntwo\n",
		},
		"CRLF submits once": {
			chunks:   []string{"one\r\ntwo\r\n"},
			want:     []inputEvent{submit("one"), submit("two")},
			wantEcho: "one\ntwo\n",
		},
		"CRLF split across reads submits once": {
			chunks:   []string{"one\r", "\ntwo\r"},
			want:     []inputEvent{submit("one"), submit("two")},
			wantEcho: "one\ntwo\n",
		},
		"nothing submitted without Enter": {
			chunks:   []string{"half a prompt"},
			wantEcho: "half a prompt",
		},
		"empty Enter is an empty submit": {
			chunks:   []string{"\r"},
			want:     []inputEvent{submit("")},
			wantEcho: "\n",
		},
		"bracketed paste keeps line breaks, then Enter submits": {
			chunks:   []string{"\x1b[200~reply: hi\nsecond line\x1b[201~", "\r"},
			want:     []inputEvent{submit("reply: hi\nsecond line")},
			wantEcho: "reply: hi\nsecond line\n",
		},
		"CR and CRLF inside a paste become one line break each": {
			chunks:   []string{"\x1b[200~a\rb\r\nc\x1b[201~\r"},
			want:     []inputEvent{submit("a\nb\nc")},
			wantEcho: "a\nb\nc\n",
		},
		"paste brackets split across reads": {
			chunks:   []string{"\x1b[2", "00~a\n", "b\x1b", "[201", "~", "\r"},
			want:     []inputEvent{submit("a\nb")},
			wantEcho: "a\nb\n",
		},
		"typed text before a paste is kept": {
			chunks:   []string{"note: ", "\x1b[200~x\ny\x1b[201~\r"},
			want:     []inputEvent{submit("note: x\ny")},
			wantEcho: "note: x\ny\n",
		},
		"paste without Enter is not submitted": {
			chunks:   []string{"\x1b[200~reply: hi\n\x1b[201~"},
			wantEcho: "reply: hi\n",
		},
		"Ctrl-C inside a paste is text": {
			chunks:   []string{"\x1b[200~a\x03b\x1b[201~\r"},
			want:     []inputEvent{submit("a\x03b")},
			wantEcho: "a\x03b\n",
		},
		"arrow keys are dropped": {
			chunks:   []string{"ab\x1b[D\x1bOAc\r"},
			want:     []inputEvent{submit("abc")},
			wantEcho: "abc\n",
		},
		"backspace and delete remove a character": {
			chunks:   []string{"abx\x7f", "c\x08d\r"},
			want:     []inputEvent{submit("abd")},
			wantEcho: "abx\b \bc\b \bd\n",
		},
		"backspace removes a whole UTF-8 character": {
			chunks:   []string{"aé\x7f\r"},
			want:     []inputEvent{submit("a")},
			wantEcho: "aé\b \b\n",
		},
		"backspace on an empty line echoes nothing": {
			chunks:   []string{"\x7f"},
			wantEcho: "",
		},
		"other control bytes are dropped, tab is kept": {
			chunks:   []string{"a\x01\tb\r"},
			want:     []inputEvent{submit("a\tb")},
			wantEcho: "a\tb\n",
		},
		"Ctrl-C interrupts and discards the line": {
			chunks:   []string{"abc\x03"},
			want:     []inputEvent{{Kind: inputInterrupt}},
			wantEcho: "abc",
		},
		"Ctrl-D on an empty line ends input": {
			chunks: []string{"\x04"},
			want:   []inputEvent{{Kind: inputEOF}},
		},
		"Ctrl-D on a non-empty line is ignored": {
			chunks:   []string{"ab\x04c\r"},
			want:     []inputEvent{submit("abc")},
			wantEcho: "abc\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, echo := feedAll(tc.chunks)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEcho, echo); diff != "" {
				t.Errorf("echo (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLineAssemblerStopsAtEvent(t *testing.T) {
	var l lineAssembler
	data := []byte("one\rtwo\r")
	ev, _, n := l.feed(data)
	if diff := cmp.Diff(submit("one"), ev); diff != "" {
		t.Errorf("first event (-want +got):\n%s", diff)
	}
	if got, want := string(data[n:]), "two\r"; got != want {
		t.Errorf("left after first event = %q, want %q", got, want)
	}
}

func TestKeyLen(t *testing.T) {
	cases := map[string]struct {
		data string
		want int
	}{
		"nothing":               {data: "", want: 0},
		"one letter":            {data: "yes", want: 1},
		"one UTF-8 character":   {data: "éa", want: 2},
		"Enter":                 {data: "\r", want: 1},
		"arrow key":             {data: "\x1b[Arest", want: 3},
		"CSI with parameters":   {data: "\x1b[1;5Cx", want: 6},
		"SS3 key":               {data: "\x1bOPx", want: 3},
		"alt and a letter":      {data: "\x1bxy", want: 2},
		"incomplete escape":     {data: "\x1b[1;", want: 4},
		"invalid UTF-8 is byte": {data: "\xffa", want: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := keyLen([]byte(tc.data)); got != tc.want {
				t.Errorf("keyLen(%q) = %d, want %d", tc.data, got, tc.want)
			}
		})
	}
}
