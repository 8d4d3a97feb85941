package paneserver

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEncodeKey(t *testing.T) {
	normal := inputModes{}
	app := inputModes{cursorKeys: true}
	cases := map[string]struct {
		key     string
		modes   inputModes
		want    string
		wantErr bool
	}{
		"enter":                 {key: "enter", want: "\r"},
		"enter in capitals":     {key: "Enter", want: "\r"},
		"escape":                {key: "esc", want: "\x1b"},
		"backspace":             {key: "backspace", want: "\x7f"},
		"single character":      {key: "y", want: "y"},
		"single multibyte rune": {key: "é", want: "é"},
		"ctrl+c":                {key: "ctrl+c", want: "\x03"},
		"tmux style ctrl":       {key: "C-c", want: "\x03"},
		"ctrl with capital":     {key: "ctrl+D", want: "\x04"},
		"ctrl+[ is escape":      {key: "ctrl+[", want: "\x1b"},
		"alt+b":                 {key: "alt+b", want: "\x1bb"},
		"alt+enter":             {key: "alt+enter", want: "\x1b\r"},
		"up":                    {key: "up", modes: normal, want: "\x1b[A"},
		"up in cursor key mode": {key: "up", modes: app, want: "\x1bOA"},
		"no home, as in herdr":  {key: "home", wantErr: true},
		"f5":                    {key: "f5", want: "\x1b[15~"},
		"shift+tab":             {key: "shift+tab", want: "\x1b[Z"},
		"unknown":               {key: "hyper+x", wantErr: true},
		"ctrl with a word":      {key: "ctrl+enter", wantErr: true},
		"empty":                 {key: "", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := encodeKey(tc.key, tc.modes)
			if (err != nil) != tc.wantErr {
				t.Fatalf("encodeKey(%q) error = %v, wantErr %v", tc.key, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("encodeKey(%q) mismatch (-want +got):\n%s", tc.key, diff)
			}
		})
	}
}

func TestEncodeText(t *testing.T) {
	cases := map[string]struct {
		text  string
		modes inputModes
		want  string
	}{
		"plain":              {text: "ls -l", want: "ls -l"},
		"bracketed paste":    {text: "fix it\nplease", modes: inputModes{bracketedPaste: true}, want: "\x1b[200~fix it\nplease\x1b[201~"},
		"nothing to bracket": {text: "", modes: inputModes{bracketedPaste: true}, want: ""},
		// An attack typed ESC[201~ through pane.send_input: it ended the
		// paste early, and the carriage return behind it submitted a turn.
		"a paste end in the text": {text: "hi\x1b[201~\r", modes: inputModes{bracketedPaste: true}, want: "\x1b[200~hi\u241b[201~\n\x1b[201~"},
		"controls in plain text":  {text: "a\x03b\x1bc", want: "a\u2403b\u241bc"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, encodeText(tc.text, tc.modes)); diff != "" {
				t.Errorf("encodeText(%q) mismatch (-want +got):\n%s", tc.text, diff)
			}
		})
	}
}
