package agents

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// claudeCall is a Claude Code transcript line of model call id.
func claudeCall(id string, in, out, read, write int64) string {
	return `{"type":"assistant","message":{"id":"` + id + `","model":"claude-sonnet-4-5","usage":{"input_tokens":` + itoa(in) + `,"output_tokens":` + itoa(out) + `,"cache_read_input_tokens":` + itoa(read) + `,"cache_creation_input_tokens":` + itoa(write) + `}}}` + "\n"
}

// codexTotal is a Codex rollout token_count line with the session's total.
func codexTotal(in, cached, out int64) string {
	return `{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":` + itoa(in) + `,"cached_input_tokens":` + itoa(cached) + `,"output_tokens":` + itoa(out) + `,"reasoning_output_tokens":0,"total_tokens":` + itoa(in+out) + `},"last_token_usage":{"total_tokens":1},"model_context_window":272000}}}` + "\n"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestCountChunk(t *testing.T) {
	type usage = fleetv1alpha1.TokenUsage
	type cursor = fleetv1alpha1.TranscriptCursor
	prompt := `{"type":"user","message":{"content":"hi"}}` + "\n"
	cases := map[string]struct {
		kind       fleetv1alpha1.AgentKind
		cursor     cursor
		chunk      string
		full       bool
		wantAdded  usage
		wantCursor cursor
	}{
		"claude: two calls": {
			kind:       fleetv1alpha1.AgentClaude,
			chunk:      prompt + claudeCall("m1", 10, 20, 30, 40) + claudeCall("m2", 1, 2, 3, 4),
			wantAdded:  usage{InputTokens: 11, OutputTokens: 22, CachedTokens: 33, CacheCreationTokens: 44, Calls: 2},
			wantCursor: cursor{Offset: int64(len(prompt) + len(claudeCall("m1", 10, 20, 30, 40)) + len(claudeCall("m2", 1, 2, 3, 4))), LastID: "m2", Last: usage{InputTokens: 1, OutputTokens: 2, CachedTokens: 3, CacheCreationTokens: 4, Calls: 1}},
		},
		"claude: the parts of one call count once": {
			kind:       fleetv1alpha1.AgentClaude,
			chunk:      claudeCall("m1", 10, 5, 0, 0) + claudeCall("m1", 10, 20, 0, 0) + claudeCall("m1", 10, 20, 0, 0),
			wantAdded:  usage{InputTokens: 10, OutputTokens: 20, Calls: 1},
			wantCursor: cursor{Offset: int64(len(claudeCall("m1", 10, 5, 0, 0)) + 2*len(claudeCall("m1", 10, 20, 0, 0))), LastID: "m1", Last: usage{InputTokens: 10, OutputTokens: 20, Calls: 1}},
		},
		"claude: a call's later part in the next chunk replaces what it counted": {
			kind:       fleetv1alpha1.AgentClaude,
			cursor:     cursor{Offset: 100, LastID: "m1", Last: usage{InputTokens: 10, OutputTokens: 5, Calls: 1}},
			chunk:      claudeCall("m1", 10, 20, 0, 0),
			wantAdded:  usage{OutputTokens: 15},
			wantCursor: cursor{Offset: 100 + int64(len(claudeCall("m1", 10, 20, 0, 0))), LastID: "m1", Last: usage{InputTokens: 10, OutputTokens: 20, Calls: 1}},
		},
		"claude: a line still being written waits": {
			kind:       fleetv1alpha1.AgentClaude,
			chunk:      claudeCall("m1", 1, 1, 0, 0) + `{"type":"assistant","mess`,
			wantAdded:  usage{InputTokens: 1, OutputTokens: 1, Calls: 1},
			wantCursor: cursor{Offset: int64(len(claudeCall("m1", 1, 1, 0, 0))), LastID: "m1", Last: usage{InputTokens: 1, OutputTokens: 1, Calls: 1}},
		},
		"claude: a line longer than a reading is passed over": {
			kind:       fleetv1alpha1.AgentClaude,
			cursor:     cursor{Offset: 7},
			chunk:      strings.Repeat("x", 64),
			full:       true,
			wantCursor: cursor{Offset: 71},
		},
		"claude: its rest fails to parse and is skipped": {
			kind:       fleetv1alpha1.AgentClaude,
			chunk:      `xxx","usage":{"input_tokens":99}}}` + "\n" + claudeCall("m2", 1, 0, 0, 0),
			wantAdded:  usage{InputTokens: 1, Calls: 1},
			wantCursor: cursor{Offset: int64(len(`xxx","usage":{"input_tokens":99}}}`+"\n") + len(claudeCall("m2", 1, 0, 0, 0))), LastID: "m2", Last: usage{InputTokens: 1, Calls: 1}},
		},
		"claude: synthetic messages and prompts are no calls": {
			kind:       fleetv1alpha1.AgentClaude,
			chunk:      prompt + `{"type":"assistant","message":{"id":"s","model":"<synthetic>","usage":{"input_tokens":5}}}` + "\n",
			wantCursor: cursor{Offset: int64(len(prompt) + len(`{"type":"assistant","message":{"id":"s","model":"<synthetic>","usage":{"input_tokens":5}}}`+"\n"))},
		},
		"codex: totals count what they gained": {
			kind:       fleetv1alpha1.AgentCodex,
			chunk:      codexTotal(100, 40, 10) + codexTotal(100, 40, 10) + codexTotal(250, 140, 30),
			wantAdded:  usage{InputTokens: 110, CachedTokens: 140, OutputTokens: 30, Calls: 2},
			wantCursor: cursor{Offset: int64(2*len(codexTotal(100, 40, 10)) + len(codexTotal(250, 140, 30))), Last: usage{InputTokens: 110, CachedTokens: 140, OutputTokens: 30, Calls: 2}},
		},
		"codex: on from the last total": {
			kind:       fleetv1alpha1.AgentCodex,
			cursor:     cursor{Offset: 5, Last: usage{InputTokens: 60, CachedTokens: 40, OutputTokens: 10, Calls: 1}},
			chunk:      `{"type":"event_msg","payload":{"type":"token_count","info":null}}` + "\n" + codexTotal(250, 140, 30),
			wantAdded:  usage{InputTokens: 50, CachedTokens: 100, OutputTokens: 20, Calls: 1},
			wantCursor: cursor{Offset: 5 + int64(len(`{"type":"event_msg","payload":{"type":"token_count","info":null}}`+"\n")+len(codexTotal(250, 140, 30))), Last: usage{InputTokens: 110, CachedTokens: 140, OutputTokens: 30, Calls: 2}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			gotCursor, gotAdded, _ := CountChunk(tc.kind, tc.cursor, []byte(tc.chunk), tc.full)
			if diff := cmp.Diff(tc.wantAdded, gotAdded); diff != "" {
				t.Errorf("added (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCursor, gotCursor); diff != "" {
				t.Errorf("cursor (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCountChunkTurns: each prompt starts a turn that holds the calls
// after it; calls before the first prompt continue the turn under way;
// tool results, Claude Code's own lines and a subagent's prompts start
// none.
func TestCountChunkTurns(t *testing.T) {
	type usage = fleetv1alpha1.TokenUsage
	claudePromptLine := func(content string) string {
		return `{"type":"user","message":{"role":"user","content":` + content + `}}` + "\n"
	}
	cases := map[string]struct {
		kind          fleetv1alpha1.AgentKind
		cursor        fleetv1alpha1.TranscriptCursor
		chunk         string
		wantTurns     []TurnCount
		wantContinued usage
	}{
		"claude: a prompt's calls, a tool result between them": {
			kind: fleetv1alpha1.AgentClaude,
			chunk: claudePromptLine(`"fix the build"`) + claudeCall("m1", 10, 1, 0, 0) +
				claudePromptLine(`[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]`) + claudeCall("m2", 20, 2, 0, 0),
			wantTurns: []TurnCount{{Prompt: "fix the build", Added: usage{InputTokens: 30, OutputTokens: 3, Calls: 2}}},
		},
		"claude: calls before the first prompt continue the turn under way": {
			kind:          fleetv1alpha1.AgentClaude,
			cursor:        fleetv1alpha1.TranscriptCursor{Offset: 10, LastID: "m0", Last: usage{InputTokens: 5, OutputTokens: 1, Calls: 1}},
			chunk:         claudeCall("m0", 5, 4, 0, 0) + claudePromptLine(`[{"type":"text","text":"second"},{"type":"text","text":"part"}]`) + claudeCall("m1", 7, 0, 0, 0),
			wantTurns:     []TurnCount{{Prompt: "second\npart", Added: usage{InputTokens: 7, Calls: 1}}},
			wantContinued: usage{OutputTokens: 3},
		},
		"claude: Claude Code's own lines and a subagent's prompts start no turn": {
			kind: fleetv1alpha1.AgentClaude,
			chunk: claudePromptLine(`"first"`) + `{"type":"user","isMeta":true,"message":{"role":"user","content":"<local-command-caveat>"}}` + "\n" +
				`{"type":"user","isSidechain":true,"message":{"role":"user","content":"a subagent's task"}}` + "\n" + claudeCall("m1", 1, 1, 0, 0),
			wantTurns: []TurnCount{{Prompt: "first", Added: usage{InputTokens: 1, OutputTokens: 1, Calls: 1}}},
		},
		"claude: two prompts, two turns; a long prompt is cut": {
			kind:      fleetv1alpha1.AgentClaude,
			chunk:     claudePromptLine(`"a"`) + claudeCall("m1", 1, 0, 0, 0) + claudePromptLine(`"`+strings.Repeat("b", MaxPromptBytes+10)+`"`) + claudeCall("m2", 2, 0, 0, 0),
			wantTurns: []TurnCount{{Prompt: "a", Added: usage{InputTokens: 1, Calls: 1}}, {Prompt: strings.Repeat("b", MaxPromptBytes), Added: usage{InputTokens: 2, Calls: 1}}},
		},
		"codex: a completed UserMessage item starts a turn; the environment context does not": {
			kind: fleetv1alpha1.AgentCodex,
			chunk: `{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>"}]}}` + "\n" +
				`{"type":"event_msg","payload":{"type":"item_completed","item":{"type":"UserMessage","content":[{"type":"text","text":"reply: hi","text_elements":[]},{"type":"image","url":"x"}]}}}` + "\n" +
				`{"type":"event_msg","payload":{"type":"item_completed","item":{"type":"AgentMessage","content":[{"type":"Text","text":"Done."}]}}}` + "\n" + codexTotal(300, 200, 20),
			wantTurns: []TurnCount{{Prompt: "reply: hi", Added: usage{InputTokens: 100, CachedTokens: 200, OutputTokens: 20, Calls: 1}}},
		},
		"codex: user_message events start turns": {
			kind:   fleetv1alpha1.AgentCodex,
			cursor: fleetv1alpha1.TranscriptCursor{Last: usage{InputTokens: 60, CachedTokens: 40, OutputTokens: 10, Calls: 1}},
			chunk: codexTotal(120, 40, 12) + `{"type":"event_msg","payload":{"type":"user_message","message":"write the tests","images":[]}}` + "\n" +
				`{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"write the tests"}]}}` + "\n" + codexTotal(300, 200, 20),
			wantTurns:     []TurnCount{{Prompt: "write the tests", Added: usage{InputTokens: 20, CachedTokens: 160, OutputTokens: 8, Calls: 1}}},
			wantContinued: usage{InputTokens: 20, OutputTokens: 2, Calls: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			next, added, turns := CountChunk(tc.kind, tc.cursor, []byte(tc.chunk), false)
			if diff := cmp.Diff(tc.wantTurns, turns); diff != "" {
				t.Errorf("turns (-want +got):\n%s", diff)
			}
			count := TokenCount{Cursor: next, Added: added, Turns: turns}
			if diff := cmp.Diff(tc.wantContinued, count.Continued()); diff != "" {
				t.Errorf("continued (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCountTokensReadsOnlyWhatWasAdded: counting again from the cursor
// counts only the lines written since, a new transcript starts over, and
// one that shrank (replaced) is counted from its start.
func TestCountTokensReadsOnlyWhatWasAdded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "projects", "s.jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	count := func(c fleetv1alpha1.TranscriptCursor, transcript string) TokenCount {
		t.Helper()
		got, ok, err := CountTokens(fleetv1alpha1.AgentClaude, dir, transcript, c)
		if err != nil || !ok {
			t.Fatalf("CountTokens = %v, %v", ok, err)
		}
		return got
	}
	first := claudeCall("m1", 10, 20, 0, 0)
	write(first)
	c1 := count(fleetv1alpha1.TranscriptCursor{}, path)
	if c1.Added.InputTokens != 10 || c1.Cursor.Offset != int64(len(first)) || c1.Cursor.Path != path || c1.More {
		t.Fatalf("first count = %+v", c1)
	}
	write(first + claudeCall("m2", 5, 5, 0, 0))
	if c2 := count(c1.Cursor, path); c2.Added != (fleetv1alpha1.TokenUsage{InputTokens: 5, OutputTokens: 5, Calls: 1}) {
		t.Errorf("second count added %+v, want only the new call", c2.Added)
	}
	if again := count(c1.Cursor, path); again.Added.Calls != 1 {
		t.Errorf("counting from the same cursor added %+v, want the same one call", again.Added)
	}
	other := filepath.Join(dir, "projects", "t.jsonl")
	if err := os.WriteFile(other, []byte(claudeCall("n1", 7, 0, 0, 0)), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := count(c1.Cursor, other); c.Added.InputTokens != 7 || c.Cursor.Path != other {
		t.Errorf("a new transcript counted %+v from %+v, want it from its start", c.Added, c.Cursor)
	}
	write(claudeCall("r1", 3, 0, 0, 0))
	if c := count(fleetv1alpha1.TranscriptCursor{Path: path, Offset: 1 << 20}, path); c.Added.InputTokens != 3 {
		t.Errorf("a replaced transcript counted %+v, want it from its start", c.Added)
	}
	if _, _, err := CountTokens(fleetv1alpha1.AgentClaude, dir, "/etc/passwd", fleetv1alpha1.TranscriptCursor{}); err == nil {
		t.Error("a transcript outside the agent directory was read")
	}
	if _, ok, err := CountTokens(fleetv1alpha1.AgentClaude, dir, filepath.Join(dir, "none.jsonl"), fleetv1alpha1.TranscriptCursor{}); ok || err != nil {
		t.Errorf("a transcript not written yet = %v, %v; want nothing counted", ok, err)
	}
}

// TestCountTokensCatchesUpInChunks: a transcript longer than one reading
// is counted over several, each saying whether more is left.
func TestCountTokensCatchesUpInChunks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	var b strings.Builder
	n := 0
	for i := 0; b.Len() < TranscriptChunk*2+TranscriptChunk/2; i++ {
		b.WriteString(claudeCall("m"+strconv.Itoa(i), 1, 0, 0, 0))
		n++
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var (
		c     fleetv1alpha1.TranscriptCursor
		total fleetv1alpha1.TokenUsage
	)
	for readings := 1; ; readings++ {
		got, ok, err := CountTokens(fleetv1alpha1.AgentClaude, dir, path, c)
		if err != nil || !ok {
			t.Fatalf("CountTokens = %v, %v", ok, err)
		}
		c, total = got.Cursor, total.Plus(got.Added)
		if !got.More {
			if readings != 3 {
				t.Errorf("%d readings, want 3", readings)
			}
			break
		}
	}
	if total.Calls != int64(n) || total.InputTokens != int64(n) {
		t.Errorf("counted %+v, want %d calls of one token each", total, n)
	}
}
