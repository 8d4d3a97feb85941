package detect

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExplainKeepsEveryMatch: the explanation holds the verdict Detect
// gives and every rule that matched, not only the one that decided.
func TestExplainKeepsEveryMatch(t *testing.T) {
	d := builtinDetector(t, "claude")
	cases := map[string]struct {
		screen, title string
		wantRule      string
		wantState     State
		// wantMatched are rules that must be among the matches.
		wantMatched []string
	}{
		"a dialog over the prompt box": {screen: "permission-bash", title: "✳ Claude Code", wantRule: "permission_prompt", wantState: StateBlocked, wantMatched: []string{"permission_prompt"}},
		"a turn with its spinner":      {screen: "working", title: "◐ Claude Code", wantRule: "turn_in_progress", wantState: StateWorking, wantMatched: []string{"turn_in_progress", "title_spinner"}},
		"the idle prompt":              {screen: "idle-final", title: "✳ Claude Code", wantRule: "prompt_box", wantState: StateIdle, wantMatched: []string{"prompt_box"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join("testdata", "claude", tc.screen+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			s := Screen{Text: string(text), Title: tc.title}
			e := d.Explain(s)
			if diff := cmp.Diff(d.Detect(s), e.Verdict); diff != "" {
				t.Errorf("Explain's verdict differs from Detect's (-detect +explain):\n%s", diff)
			}
			if e.Rule != tc.wantRule || e.State != tc.wantState {
				t.Errorf("Explain() = %s by %q, want %s by %q", e.State, e.Rule, tc.wantState, tc.wantRule)
			}
			matched := map[string]Match{}
			for _, m := range e.Matches {
				matched[m.Rule] = m
				if m.Region == "" {
					t.Errorf("match %s names no region", m.Rule)
				}
			}
			for _, id := range tc.wantMatched {
				if _, ok := matched[id]; !ok {
					t.Errorf("rule %s is not among the matches %+v", id, e.Matches)
				}
			}
			if best, ok := matched[e.Rule]; !ok || best.State != e.State {
				t.Errorf("the deciding rule %s is not a match of state %s: %+v", e.Rule, e.State, e.Matches)
			}
		})
	}
	if e := d.Explain(Screen{Text: "some output\n"}); e.Rule != "" || len(e.Matches) != 0 || e.State != StateIdle {
		t.Errorf("Explain() of a screen no rule knows = %+v, want the idle fallback and no matches", e)
	}
}
