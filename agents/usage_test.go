package agents

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
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
			got, ok, err := ContextUsageOf(fleetv1alpha1.AgentClaude, dir, path)
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
		if got, ok, err := ContextUsageOf(fleetv1alpha1.AgentClaude, dir, path); err != nil || !ok || got.Used != 50000 {
			t.Errorf("got %+v %v %v", got, ok, err)
		}
	})
	t.Run("a transcript outside the agent directory is refused", func(t *testing.T) {
		for _, p := range []string{"/etc/passwd", filepath.Join(t.TempDir(), "s.jsonl"), "relative.jsonl"} {
			if _, _, err := ContextUsageOf(fleetv1alpha1.AgentClaude, t.TempDir(), p); err == nil {
				t.Errorf("%s was read", p)
			}
		}
	})
	t.Run("a link out of the agent directory is refused", func(t *testing.T) {
		outside := filepath.Join(t.TempDir(), "s.jsonl")
		if err := os.WriteFile(outside, []byte(main), 0o600); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		for _, link := range []string{filepath.Join(dir, "s.jsonl"), filepath.Join(dir, "projects")} {
			target := outside
			if filepath.Base(link) == "projects" {
				target = filepath.Dir(outside)
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []string{filepath.Join(dir, "s.jsonl"), filepath.Join(dir, "projects", "s.jsonl")} {
			if _, _, err := ContextUsageOf(fleetv1alpha1.AgentClaude, dir, p); err == nil {
				t.Errorf("%s was read through its link", p)
			}
		}
	})
	t.Run("a missing transcript is no usage yet", func(t *testing.T) {
		dir := t.TempDir()
		if _, ok, err := ContextUsageOf(fleetv1alpha1.AgentClaude, dir, filepath.Join(dir, "gone.jsonl")); err != nil || ok {
			t.Errorf("ok %v err %v", ok, err)
		}
	})
}

// TestCodexContextUsage reads token counts as the pinned Codex writes them
// in its rollout (values from a real run against the stand-in model).
func TestCodexContextUsage(t *testing.T) {
	count := func(last, window int) string {
		return fmt.Sprintf(`{"timestamp":"2026-12-01T17:34:20.000Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":47451,"cached_input_tokens":0,"output_tokens":24,"reasoning_output_tokens":0,"total_tokens":47475},"last_token_usage":{"input_tokens":%d,"cached_input_tokens":0,"output_tokens":8,"reasoning_output_tokens":0,"total_tokens":%d},"last_usage_includes_reasoning":true,"model_context_window":%d},"rate_limits":null}}`+"\n", last-8, last, window)
	}
	heartbeat := `{"timestamp":"2026-12-01T17:34:18.000Z","type":"event_msg","payload":{"type":"token_count","info":null,"rate_limits":null}}` + "\n"
	meta := `{"timestamp":"2026-12-01T17:34:18.000Z","type":"session_meta","payload":{"id":"s","cli_version":"0.171.0"}}` + "\n"
	cases := map[string]struct {
		rollout     string
		want        ContextUsage
		wantOK      bool
		wantPercent int32
	}{
		"no model call yet":          {rollout: meta + heartbeat},
		"the latest call counts":     {rollout: meta + count(15709, 475000) + heartbeat + count(15923, 475000), want: ContextUsage{Used: 15923, Window: 475000}, wantOK: true, wantPercent: 96},
		"a count without its window": {rollout: meta + count(15709, 0)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "codex", "sessions", "rollout.jsonl")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tc.rollout), 0o600); err != nil {
				t.Fatal(err)
			}
			got, ok, err := ContextUsageOf(fleetv1alpha1.AgentCodex, dir, path)
			if err != nil || ok != tc.wantOK || got != tc.want {
				t.Fatalf("got %+v %v %v, want %+v %v", got, ok, err, tc.want, tc.wantOK)
			}
			if ok && got.RemainingPercent() != tc.wantPercent {
				t.Errorf("remaining %d%%, want %d%%", got.RemainingPercent(), tc.wantPercent)
			}
		})
	}
}
