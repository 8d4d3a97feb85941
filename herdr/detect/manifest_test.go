package detect

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestClaudeScreens runs fleetd's Claude Code rules over screens captured
// with the pinned CLI.
func TestClaudeScreens(t *testing.T) {
	d := builtinDetector(t, "claude")
	cases := map[string]struct {
		title       string
		want        State
		wantRule    string
		wantVisible bool
		wantText    string
	}{
		"idle-final":               {title: "✳ Claude Code", want: StateIdle, wantRule: "prompt_box", wantVisible: true},
		"idle-auto":                {want: StateIdle, wantRule: "prompt_box", wantVisible: true},
		"idle-manual":              {want: StateIdle, wantRule: "prompt_box", wantVisible: true},
		"idle-dontask":             {want: StateIdle, wantRule: "prompt_box", wantVisible: true},
		"api-error":                {title: "✳ Claude Code", want: StateIdle, wantRule: "prompt_box", wantVisible: true},
		"after-escape":             {title: "✳ Fake session title", want: StateIdle, wantRule: "prompt_box", wantVisible: true},
		"after-escape-tool":        {title: "✳ Claude Code", want: StateIdle, wantRule: "prompt_box", wantVisible: true},
		"ctrl-c-once":              {title: "✳ Fake session title", want: StateIdle, wantRule: "prompt_box", wantVisible: true},
		"paste-long-before-enter":  {want: StateIdle, wantRule: "prompt_box", wantVisible: true},
		"working":                  {title: "◐ Claude Code", want: StateWorking, wantRule: "turn_in_progress", wantVisible: true},
		"working-final":            {title: "◑ Claude Code", want: StateWorking, wantRule: "turn_in_progress", wantVisible: true},
		"working-tool":             {want: StateWorking, wantRule: "turn_in_progress", wantVisible: true},
		"slow-hook-stop":           {want: StateWorking, wantRule: "turn_in_progress", wantVisible: true},
		"permission-bash":          {title: "✳ Claude Code", want: StateBlocked, wantRule: "permission_prompt", wantVisible: true, wantText: "curl -s http://127.0.0.1:18080/z"},
		"permission-mcp":           {want: StateBlocked, wantRule: "permission_prompt", wantVisible: true, wantText: "fleetd — Bridge Reply Tool"},
		"trust-dialog":             {want: StateBlocked, wantRule: "confirm_dialog", wantVisible: true, wantText: "Yes, I trust this folder"},
		"apikey-dialog":            {want: StateBlocked, wantRule: "confirm_dialog", wantVisible: true, wantText: "Do you want to use this API key?"},
		"bypass-start":             {want: StateBlocked, wantRule: "confirm_dialog", wantVisible: true, wantText: "Bypass Permissions mode"},
		"auto-mode-billing-notice": {want: StateBlocked, wantRule: "continue_notice", wantVisible: true, wantText: "We're changing auto mode"},
		"resume-picker":            {want: StateBlocked, wantRule: "picker", wantVisible: true, wantText: "Resume session"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			screen, err := os.ReadFile(filepath.Join("testdata", "claude", name+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			v := d.Detect(Screen{Text: string(screen), Title: tc.title})
			if v.State != tc.want || v.Rule != tc.wantRule || v.Visible != tc.wantVisible {
				t.Errorf("Detect() = %s by %q (visible %v), want %s by %q (visible %v)", v.State, v.Rule, v.Visible, tc.want, tc.wantRule, tc.wantVisible)
			}
			if !strings.Contains(v.Text, tc.wantText) {
				t.Errorf("Detect() text = %q, want it to hold %q", v.Text, tc.wantText)
			}
		})
	}
}

// TestTitleSpinnerAloneMeansWorking: a screen whose footer scrolled away
// still shows a turn through the title.
func TestTitleSpinnerAloneMeansWorking(t *testing.T) {
	d := builtinDetector(t, "claude")
	v := d.Detect(Screen{Text: "● thinking about it\n", Title: "◑ Claude Code"})
	if v.State != StateWorking || v.Rule != "title_spinner" {
		t.Errorf("Detect() = %+v, want working by the title spinner", v)
	}
	if v := d.Detect(Screen{Text: "some output\n"}); v.State != StateIdle || v.Visible || v.Rule != "" {
		t.Errorf("Detect() of an unknown screen = %+v, want the idle fallback, not visible", v)
	}
}

// TestParseRefusesWhatHerdrRefuses checks manifest validation.
func TestParseRefusesWhatHerdrRefuses(t *testing.T) {
	cases := map[string]string{
		"unknown field":        "id='a'\nbogus=1\n[[rules]]\nid='r'\ncontains=['x']\n",
		"unknown region":       "id='a'\n[[rules]]\nid='r'\nregion='middle'\ncontains=['x']\n",
		"region without count": "id='a'\n[[rules]]\nid='r'\nregion='bottom_lines'\ncontains=['x']\n",
		"count of zero":        "id='a'\n[[rules]]\nid='r'\nregion='bottom_lines(0)'\ncontains=['x']\n",
		"only not":             "id='a'\n[[rules]]\nid='r'\nnot=[{contains=['x']}]\n",
		"bad regex":            "id='a'\n[[rules]]\nid='r'\nregex=['(']\n",
		"skip with a state":    "id='a'\n[[rules]]\nid='r'\nstate='idle'\nskip_state_update=true\ncontains=['x']\n",
		"no rules":             "id='a'\n",
		"newer engine":         "id='a'\nmin_engine_version=9\n[[rules]]\nid='r'\ncontains=['x']\n",
	}
	for name, manifest := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(manifest)); err == nil {
				t.Errorf("Parse() accepted a manifest with %s", name)
			}
		})
	}
}

// TestRegions checks the regions on a screen with a prompt box.
func TestRegions(t *testing.T) {
	screen := Screen{Text: strings.Join([]string{
		"● earlier output", "", "last words", "────────", "❯ typing", "────────", "  footer",
	}, "\n"), Title: "✳ x"}
	cases := map[string]string{
		"whole_recent":                    screen.Text,
		"bottom_lines(2)":                 "────────\n  footer",
		"bottom_non_empty_lines(2)":       "────────\n  footer",
		"top_non_empty_lines(2)":          "● earlier output\n\nlast words",
		"after_last_horizontal_rule":      "  footer",
		"prompt_box_body":                 "❯ typing",
		"above_prompt_box":                "● earlier output\n\nlast words",
		"last_non_empty_above_prompt_box": "last words",
		"osc_title":                       "✳ x",
	}
	for spec, want := range cases {
		t.Run(spec, func(t *testing.T) {
			r, err := parseRegion(spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.of(screen); got != want {
				t.Errorf("region %s = %q, want %q", spec, got, want)
			}
		})
	}
}

// TestOverridesReplaceBuiltins: a manifest in the override directory
// replaces fleetd's own for its label.
func TestOverridesReplaceBuiltins(t *testing.T) {
	dir := t.TempDir()
	override := "id='claude'\n[[rules]]\nid='always_blocked'\nstate='blocked'\nvisible_blocker=true\ncontains=['']\n"
	if err := os.WriteFile(filepath.Join(dir, "claude.toml"), []byte(override), 0o600); err != nil {
		t.Fatal(err)
	}
	ds, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v := ds["claude"].Detect(Screen{Text: "❯ "}); v.Rule != "always_blocked" {
		t.Errorf("override not used: %+v", v)
	}
}

func builtinDetector(t *testing.T, label string) *Detector {
	t.Helper()
	ds, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	d := ds[label]
	if d == nil {
		t.Fatalf("no built-in manifest for %s", label)
	}
	return d
}

// TestRustRegexSyntax: herdr's manifests use Rust's regex syntax; the
// escapes Go's lacks are translated.
func TestRustRegexSyntax(t *testing.T) {
	cases := map[string]struct{ expr, match, miss string }{
		`\uXXXX`:              {expr: `^[\u2800-\u28FF] `, match: "⠋ working", miss: "x working"},
		`\u{X}`:               {expr: `^⚠[\u{fe0e}\u{fe0f}]?$`, match: "⚠\ufe0f", miss: "⚠x"},
		`\p{Alphabetic}`:      {expr: `^\s*●\s+\p{Alphabetic}`, match: " ● Reading", miss: " ● 42"},
		`class with a prop`:   {expr: `^[\p{Alphabetic}-]+$`, match: "ab-c", miss: "ab c"},
		`escaped backslash u`: {expr: `\\u`, match: `\u`, miss: "u"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			re, err := regexp.Compile(goRegexp(tc.expr))
			if err != nil {
				t.Fatalf("goRegexp(%q) = %q: %v", tc.expr, goRegexp(tc.expr), err)
			}
			if !re.MatchString(tc.match) || re.MatchString(tc.miss) {
				t.Errorf("%q (as %q) matches %q: %v, %q: %v", tc.expr, goRegexp(tc.expr), tc.match, re.MatchString(tc.match), tc.miss, re.MatchString(tc.miss))
			}
		})
	}
}

// TestCodexScreens runs fleetd's Codex rules over screens captured with the
// pinned CLI, with the titles it set at the time.
func TestCodexScreens(t *testing.T) {
	d := builtinDetector(t, "codex")
	const spinner, idleTitle = "⠙ Stub title | w4-git", "Stub title | w4-git"
	cases := map[string]struct {
		title    string
		want     State
		wantRule string
		wantText string
	}{
		"idle-final-seed-git":            {title: "w-git", want: StateIdle, wantRule: "composer"},
		"idle-final-seed-nogit":          {title: "w-nogit", want: StateIdle, wantRule: "composer"},
		"idle-nogit-first-start":         {title: "wG-nogit", want: StateIdle, wantRule: "composer"},
		"after-esc-interrupt-nodaemon":   {title: idleTitle, want: StateIdle, wantRule: "composer"},
		"after-ctrlc-interrupt-nodaemon": {title: idleTitle, want: StateIdle, wantRule: "composer"},
		"approval-declined-esc":          {title: idleTitle, want: StateIdle, wantRule: "composer"},
		"retry-500-final":                {title: idleTitle, want: StateIdle, wantRule: "composer"},
		"working-turn-waiting":           {title: spinner, want: StateWorking, wantRule: "turn_in_progress"},
		"idle-after-first-answer":        {title: "say hello please | w-nogit", want: StateIdle, wantRule: "composer"},
		"retry-500-t5s":                  {title: spinner, want: StateWorking, wantRule: "turn_in_progress"},
		// While text streams no status line shows: only the title tells.
		"working-turn":                  {title: spinner, want: StateWorking, wantRule: "title_spinner"},
		"approval-final-seed":           {title: "[ ! ] Action Required | Stub title | w4-git", want: StateBlocked, wantRule: "approval_prompt", wantText: "$ touch /home/devuser/codex/final-escalated.txt && echo final-ok"},
		"approval-shell-gpt52":          {want: StateBlocked, wantRule: "approval_prompt", wantText: "Would you like to run the following command?"},
		"approval-mcp-tool":             {title: "[ . ] Action Required | RIDGE probe | w-nogit", want: StateBlocked, wantRule: "tool_approval", wantText: `Allow the fleetd MCP server to run tool "bridge_reply"?`},
		"approval-mcp-tool-prompt-mode": {want: StateBlocked, wantRule: "tool_approval", wantText: "bridge_reply"},
		"trust-screen-git":              {want: StateBlocked, wantRule: "start_screen", wantText: "Trust this folder?"},
		"hooks-need-review":             {want: StateBlocked, wantRule: "start_screen", wantText: "Hooks need review"},
		"login-screen":                  {want: StateBlocked, wantRule: "start_screen", wantText: "Sign in with ChatGPT"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			screen, err := os.ReadFile(filepath.Join("testdata", "codex", name+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			v := d.Detect(Screen{Text: string(screen), Title: tc.title})
			if v.State != tc.want || v.Rule != tc.wantRule || !v.Visible {
				t.Errorf("Detect() = %s by %q (visible %v), want %s by %q, visible", v.State, v.Rule, v.Visible, tc.want, tc.wantRule)
			}
			if !strings.Contains(v.Text, tc.wantText) {
				t.Errorf("Detect() text = %q, want it to hold %q", v.Text, tc.wantText)
			}
		})
	}
	// The title alone: an approval whose dialog scrolled out of view.
	if v := d.Detect(Screen{Text: "• Running it\n", Title: "[ ! ] Action Required | x"}); v.State != StateBlocked || v.Rule != "title_action_required" {
		t.Errorf("Detect() = %+v, want blocked by the title", v)
	}
}
