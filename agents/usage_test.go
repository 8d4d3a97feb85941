package agents

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClaudeContextUsage(t *testing.T) {
	line := func(s string) string { return s + "\n" }
	main := line(`{"type":"assistant","isSidechain":false,"message":{"model":"claude-sonnet-4-5","usage":{"input_tokens":1000,"cache_creation_input_tokens":20000,"cache_read_input_tokens":29000,"output_tokens":0}}}`)
	cases := map[string]struct {
		transcript  string
		want        ContextUsage
		wantOK      bool
		wantPercent int32
	}{
		"no model call yet":        {transcript: line(`{"type":"user","message":{"content":"hi"}}`)},
		"one call":                 {transcript: main, want: ContextUsage{Used: 50000, Window: 200000}, wantOK: true, wantPercent: 75},
		"the latest call counts":   {transcript: line(`{"type":"assistant","message":{"model":"m","usage":{"input_tokens":5}}}`) + main, want: ContextUsage{Used: 50000, Window: 200000}, wantOK: true, wantPercent: 75},
		"a subagent's call is not": {transcript: main + line(`{"type":"assistant","isSidechain":true,"message":{"model":"m","usage":{"input_tokens":190000}}}`), want: ContextUsage{Used: 50000, Window: 200000}, wantOK: true, wantPercent: 75},
		"nor a synthetic message":  {transcript: main + line(`{"type":"assistant","message":{"model":"<synthetic>","usage":{"input_tokens":0}}}`), want: ContextUsage{Used: 50000, Window: 200000}, wantOK: true, wantPercent: 75},
		"a broken line is skipped": {transcript: main + line(`{"type":"assist`), want: ContextUsage{Used: 50000, Window: 200000}, wantOK: true, wantPercent: 75},
		"a 1M window":              {transcript: line(`{"type":"assistant","message":{"model":"claude-sonnet-4-5[1m]","usage":{"input_tokens":500000}}}`), want: ContextUsage{Used: 500000, Window: 1000000}, wantOK: true, wantPercent: 50},
		"over the window":          {transcript: line(`{"type":"assistant","message":{"model":"m","usage":{"input_tokens":250000}}}`), want: ContextUsage{Used: 250000, Window: 200000}, wantOK: true, wantPercent: 0},
		"one token used":           {transcript: line(`{"type":"assistant","message":{"model":"m","usage":{"input_tokens":1}}}`), want: ContextUsage{Used: 1, Window: 200000}, wantOK: true, wantPercent: 99},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "claude", "projects", "p", "s.jsonl")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tc.transcript), 0o600); err != nil {
				t.Fatal(err)
			}
			got, ok, err := ClaudeContextUsage(dir, path)
			if err != nil || ok != tc.wantOK || got != tc.want {
				t.Fatalf("got %+v %v %v, want %+v %v", got, ok, err, tc.want, tc.wantOK)
			}
			if ok && got.RemainingPercent() != tc.wantPercent {
				t.Errorf("remaining %d%%, want %d%%", got.RemainingPercent(), tc.wantPercent)
			}
		})
	}

	t.Run("a long transcript is read from its end", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "s.jsonl")
		filler := strings.Repeat(line(`{"type":"user","message":{"content":"`+strings.Repeat("x", 1000)+`"}}`), 2000)
		if err := os.WriteFile(path, []byte(filler+main), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := ClaudeContextUsage(dir, path); err != nil || !ok || got.Used != 50000 {
			t.Errorf("got %+v %v %v", got, ok, err)
		}
	})
	t.Run("a transcript outside the agent directory is refused", func(t *testing.T) {
		for _, p := range []string{"/etc/passwd", filepath.Join(t.TempDir(), "s.jsonl"), "relative.jsonl"} {
			if _, _, err := ClaudeContextUsage(t.TempDir(), p); err == nil {
				t.Errorf("%s was read", p)
			}
		}
	})
	t.Run("a missing transcript is no usage yet", func(t *testing.T) {
		dir := t.TempDir()
		if _, ok, err := ClaudeContextUsage(dir, filepath.Join(dir, "gone.jsonl")); err != nil || ok {
			t.Errorf("ok %v err %v", ok, err)
		}
	})
}
