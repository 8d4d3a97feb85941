package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParsePlan(t *testing.T) {
	cases := map[string]struct {
		text    string
		want    plan
		wantErr []string
	}{
		"plain text is echoed": {
			text: "please fix the build",
			want: plan{Steps: []step{{Kind: stepReply, Text: "echo: please fix the build"}}},
		},
		"multi-line plain text is echoed whole and trimmed": {
			text: "  first line\nsecond line\n",
			want: plan{Steps: []step{{Kind: stepReply, Text: "echo: first line\nsecond line"}}},
		},
		"blank prompt does nothing": {
			text: " \n ",
			want: plan{},
		},
		"reply": {
			text: "reply: all done",
			want: plan{Steps: []step{{Kind: stepReply, Text: "all done"}}},
		},
		"keyword is case-insensitive and spaces are trimmed": {
			text: "  RePly :   all done  ",
			want: plan{Steps: []step{{Kind: stepReply, Text: "all done"}}},
		},
		"colon in the argument is kept": {
			text: "reply: a: b",
			want: plan{Steps: []step{{Kind: stepReply, Text: "a: b"}}},
		},
		"empty reply": {
			text: "reply:",
			want: plan{Steps: []step{{Kind: stepReply}}},
		},
		"text lines around directives are ignored": {
			text: "Note: this is prose\nreply: done\nthanks",
			want: plan{Steps: []step{{Kind: stepReply, Text: "done"}}},
		},
		"keyword without colon is prose": {
			text: "reply\nsilent",
			want: plan{Steps: []step{{Kind: stepReply, Text: "echo: reply\nsilent"}}},
		},
		"lone ask replies with the answer": {
			text: "ask: which branch?",
			want: plan{Steps: []step{{Kind: stepAsk, Text: "which branch?", ReplyWithAnswer: true}}},
		},
		"ask followed by reply leaves the reply to the script": {
			text: "ask: which branch?\nreply: using {answer}",
			want: plan{Steps: []step{
				{Kind: stepAsk, Text: "which branch?"},
				{Kind: stepReply, Text: "using {answer}"},
			}},
		},
		"only the last of two asks replies": {
			text: "ask: one?\nask: two?\nsilent: bye",
			want: plan{Steps: []step{
				{Kind: stepAsk, Text: "one?"},
				{Kind: stepAsk, Text: "two?", ReplyWithAnswer: true},
				{Kind: stepSilent, Text: "bye"},
			}},
		},
		"reply before ask does not count": {
			text: "reply: early\nask: late?",
			want: plan{Steps: []step{
				{Kind: stepReply, Text: "early"},
				{Kind: stepAsk, Text: "late?", ReplyWithAnswer: true},
			}},
		},
		"silent": {
			text: "silent: nothing to say",
			want: plan{Steps: []step{{Kind: stepSilent, Text: "nothing to say"}}},
		},
		"sleep in fractional seconds": {
			text: "sleep: 1.5",
			want: plan{Steps: []step{{Kind: stepSleep, Duration: 1500 * time.Millisecond}}},
		},
		"sleep zero": {
			text: "sleep: 0",
			want: plan{Steps: []step{{Kind: stepSleep}}},
		},
		"dialog": {
			text: "dialog: Allow rm -rf?",
			want: plan{Steps: []step{{Kind: stepDialog, Text: "Allow rm -rf?"}}},
		},
		"bare crash exits 1": {
			text: "crash",
			want: plan{Steps: []step{{Kind: stepCrash, Code: 1}}},
		},
		"crash with a code": {
			text: "crash: 42",
			want: plan{Steps: []step{{Kind: stepCrash, Code: 42}}},
		},
		"bare exit exits 0": {
			text: "exit",
			want: plan{Steps: []step{{Kind: stepExit}}},
		},
		"directives keep their order": {
			text: "sleep: 0.25\ndialog: ok?\nreply: done\ncrash: 3",
			want: plan{Steps: []step{
				{Kind: stepSleep, Duration: 250 * time.Millisecond},
				{Kind: stepDialog, Text: "ok?"},
				{Kind: stepReply, Text: "done"},
				{Kind: stepCrash, Code: 3},
			}},
		},
		"bad sleep": {
			text:    "sleep: soon",
			wantErr: []string{`line 1: sleep: want a number of seconds such as 1.5, got "soon"`},
		},
		"negative sleep": {
			text:    "sleep: -1",
			wantErr: []string{"line 1: sleep:"},
		},
		"crash zero is not a crash": {
			text:    "crash: 0",
			wantErr: []string{`line 1: crash: want an exit status from 1 to 255, got "0"`},
		},
		"exit out of range": {
			text:    "exit: 256",
			wantErr: []string{"line 1: exit:"},
		},
		"every bad line is reported and nothing runs": {
			text:    "reply: fine\nsleep: x\ncrash: y",
			wantErr: []string{"line 2: sleep:", "line 3: crash:"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parsePlan(tc.text)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("parsePlan(%q) = %+v, want an error", tc.text, got)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("parsePlan(%q) error %q does not contain %q", tc.text, err, want)
					}
				}
				if diff := cmp.Diff(plan{}, got); diff != "" {
					t.Errorf("parsePlan(%q) returned steps with an error (-want +got):\n%s", tc.text, diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("parsePlan(%q): %v", tc.text, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parsePlan(%q) (-want +got):\n%s", tc.text, diff)
			}
		})
	}
}
