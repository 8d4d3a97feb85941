// Package detect tells an agent's state from its terminal screen, for what
// no hook reports: dialogs an agent shows before its session starts or on
// its own, and a turn that ended without its end being reported.
//
// Rules are data, in herdr's screen-manifest format (TOML): each rule names
// a state (idle, working, blocked, unknown), a priority, a region of the
// screen and the text conditions it looks for. The matching rule of highest
// priority decides, the earlier one on a tie; when none matches, a known
// agent is taken to be idle. A manifest written for herdr works here
// unchanged, and fleetd's own manifests (manifests/*.toml) are written from
// screens captured with the pinned agent versions.
package detect

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// EngineVersion is the manifest engine version this package implements.
const EngineVersion = 3

// Limits of a manifest, as herdr enforces them.
const (
	maxRules           = 128
	maxGateDepth       = 8
	maxMatchersPerGate = 32
	maxGates           = 512
	maxMatchers        = 1024
	maxMatcherLength   = 512
)

// State is an agent state a rule decides.
type State string

// States.
const (
	StateIdle    State = "idle"
	StateWorking State = "working"
	StateBlocked State = "blocked"
	StateUnknown State = "unknown"
)

// Manifest is one agent's rules, as written in TOML.
type Manifest struct {
	ID               string   `toml:"id"`
	Version          string   `toml:"version"`
	MinEngineVersion int      `toml:"min_engine_version"`
	UpdatedAt        string   `toml:"updated_at"`
	Aliases          []string `toml:"aliases"`
	Rules            []Rule   `toml:"rules"`
}

// Rule is one way a screen can look.
type Rule struct {
	ID       string `toml:"id"`
	State    State  `toml:"state"`
	Priority int    `toml:"priority"`
	Region   string `toml:"region"`
	// VisibleIdle, VisibleWorking and VisibleBlocker say the rule sees the
	// state on screen, not by default: a dialog, a spinner, a prompt box.
	VisibleIdle    bool `toml:"visible_idle"`
	VisibleWorking bool `toml:"visible_working"`
	VisibleBlocker bool `toml:"visible_blocker"`
	// SkipStateUpdate keeps the previous state while the rule matches (a
	// transcript viewer, a menu).
	SkipStateUpdate bool `toml:"skip_state_update"`
	Gate
}

// Gate is a set of text conditions on a region; every one must hold.
type Gate struct {
	// Contains are substrings, compared ignoring case.
	Contains []string `toml:"contains"`
	// Regex are regular expressions on the whole region.
	Regex []string `toml:"regex"`
	// LineRegex are regular expressions each of which must match a line.
	LineRegex []string `toml:"line_regex"`
	// All must all match, Any at least one (when given), Not none.
	All []Gate `toml:"all"`
	Any []Gate `toml:"any"`
	Not []Gate `toml:"not"`
}

// Screen is what a rule looks at.
type Screen struct {
	// Text is the screen as plain text, top to bottom (herdr's pane.read
	// source "detection").
	Text string
	// Title is the terminal title the program set (OSC 0 or 2).
	Title string
	// Progress is the latest OSC 9 progress payload, if known.
	Progress string
}

// Verdict is what a screen says.
type Verdict struct {
	// State is the agent's state.
	State State
	// Rule is the id of the deciding rule; empty for the idle fallback.
	Rule string
	// Visible says the state is seen on screen (the rule's visible_* flag
	// agrees with its state), not assumed.
	Visible bool
	// Skip says the screen shows something that must not change the state.
	Skip bool
	// Text is the deciding rule's region of the screen: the dialog, for a
	// blocked state.
	Text string
}

// Detector evaluates one manifest.
type Detector struct {
	manifest Manifest
	rules    []compiledRule
}

// Agent is the agent label the manifest is for.
func (d *Detector) Agent() string { return d.manifest.ID }

// Version is the manifest's version.
func (d *Detector) Version() string { return d.manifest.Version }

type compiledRule struct {
	Rule
	region region
	gate   compiledGate
}

type compiledGate struct {
	contains  []string
	regex     []*regexp.Regexp
	lineRegex []*regexp.Regexp
	all       []compiledGate
	any       []compiledGate
	not       []compiledGate
}

// Parse reads a manifest, refusing what herdr refuses: unknown fields,
// unknown regions, rules without a positive condition, and regular
// expressions that do not compile.
func Parse(data []byte) (*Detector, error) {
	var m Manifest
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&m)
	if err != nil {
		return nil, fmt.Errorf("decoding manifest: %w", err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		keys := make([]string, len(undecoded))
		for i, k := range undecoded {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("manifest has unknown fields: %s", strings.Join(keys, ", "))
	}
	if m.ID == "" {
		return nil, errors.New("manifest has no id")
	}
	if m.MinEngineVersion > EngineVersion {
		return nil, fmt.Errorf("manifest %s needs engine version %d; this is %d", m.ID, m.MinEngineVersion, EngineVersion)
	}
	if len(m.Rules) == 0 || len(m.Rules) > maxRules {
		return nil, fmt.Errorf("manifest %s has %d rules; want 1 to %d", m.ID, len(m.Rules), maxRules)
	}
	d := &Detector{manifest: m}
	var counts counter
	for i, r := range m.Rules {
		if r.ID == "" {
			return nil, fmt.Errorf("manifest %s: rule %d has no id", m.ID, i)
		}
		if r.State == "" {
			r.State = StateUnknown
		}
		switch r.State {
		case StateIdle, StateWorking, StateBlocked, StateUnknown:
		default:
			return nil, fmt.Errorf("rule %s: unknown state %q", r.ID, r.State)
		}
		if r.SkipStateUpdate && (r.State != StateUnknown || r.VisibleIdle || r.VisibleWorking || r.VisibleBlocker) {
			return nil, fmt.Errorf("rule %s: skip_state_update needs state unknown and no visible_* flag", r.ID)
		}
		reg, err := parseRegion(r.Region)
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", r.ID, err)
		}
		g, err := compileGate(r.Gate, 0, &counts)
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", r.ID, err)
		}
		d.rules = append(d.rules, compiledRule{Rule: r, region: reg, gate: g})
	}
	return d, nil
}

type counter struct{ gates, matchers int }

func compileGate(g Gate, depth int, n *counter) (compiledGate, error) {
	if depth > maxGateDepth {
		return compiledGate{}, fmt.Errorf("gates nest deeper than %d", maxGateDepth)
	}
	if len(g.Contains)+len(g.Regex)+len(g.LineRegex)+len(g.All)+len(g.Any) == 0 {
		return compiledGate{}, errors.New("a gate needs contains, regex, line_regex, all or any")
	}
	direct := len(g.Contains) + len(g.Regex) + len(g.LineRegex)
	n.gates++
	n.matchers += direct
	switch {
	case direct > maxMatchersPerGate:
		return compiledGate{}, fmt.Errorf("a gate has %d matchers; at most %d", direct, maxMatchersPerGate)
	case n.gates > maxGates:
		return compiledGate{}, fmt.Errorf("more than %d gates", maxGates)
	case n.matchers > maxMatchers:
		return compiledGate{}, fmt.Errorf("more than %d matchers", maxMatchers)
	}
	var c compiledGate
	for _, s := range g.Contains {
		if len(s) > maxMatcherLength {
			return c, fmt.Errorf("matcher longer than %d characters", maxMatcherLength)
		}
		c.contains = append(c.contains, strings.ToLower(s))
	}
	for _, list := range []struct {
		src []string
		dst *[]*regexp.Regexp
	}{{g.Regex, &c.regex}, {g.LineRegex, &c.lineRegex}} {
		for _, s := range list.src {
			if len(s) > maxMatcherLength {
				return c, fmt.Errorf("matcher longer than %d characters", maxMatcherLength)
			}
			re, err := regexp.Compile(goRegexp(s))
			if err != nil {
				return c, fmt.Errorf("regex %q: %w", s, err)
			}
			*list.dst = append(*list.dst, re)
		}
	}
	for _, sub := range []struct {
		src []Gate
		dst *[]compiledGate
	}{{g.All, &c.all}, {g.Any, &c.any}, {g.Not, &c.not}} {
		for _, sg := range sub.src {
			cg, err := compileGate(sg, depth+1, n)
			if err != nil {
				return c, err
			}
			*sub.dst = append(*sub.dst, cg)
		}
	}
	return c, nil
}

func (g *compiledGate) matches(text string, lines []string) bool {
	if len(g.contains) > 0 {
		lower := strings.ToLower(text)
		for _, s := range g.contains {
			if !strings.Contains(lower, s) {
				return false
			}
		}
	}
	for _, re := range g.regex {
		if !re.MatchString(text) {
			return false
		}
	}
	for _, re := range g.lineRegex {
		if !slices.ContainsFunc(lines, re.MatchString) {
			return false
		}
	}
	for i := range g.all {
		if !g.all[i].matches(text, lines) {
			return false
		}
	}
	if len(g.any) > 0 && !slices.ContainsFunc(g.any, func(a compiledGate) bool { return a.matches(text, lines) }) {
		return false
	}
	for i := range g.not {
		if g.not[i].matches(text, lines) {
			return false
		}
	}
	return true
}

// Detect evaluates every rule against the screen. The matching rule of
// highest priority decides, the earlier one on a tie; with no match the
// agent is idle, not visibly so.
func (d *Detector) Detect(s Screen) Verdict {
	var best *compiledRule
	var bestText string
	for i := range d.rules {
		r := &d.rules[i]
		text := r.region.of(s)
		if !r.gate.matches(text, splitLines(text)) {
			continue
		}
		if best == nil || r.Priority > best.Priority {
			best, bestText = r, text
		}
	}
	if best == nil {
		return Verdict{State: StateIdle}
	}
	v := Verdict{State: best.State, Rule: best.ID, Skip: best.SkipStateUpdate, Text: bestText}
	switch best.State {
	case StateIdle:
		v.Visible = best.VisibleIdle
	case StateWorking:
		v.Visible = best.VisibleWorking
	case StateBlocked:
		v.Visible = best.VisibleBlocker
	}
	return v
}

func splitLines(text string) []string {
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n")
}

// region is a part of the screen a rule looks at.
type region struct {
	kind string
	n    int
}

// regionKinds are herdr's regions; those marked true take a line count.
var regionKinds = map[string]bool{
	"whole_recent": false, "bottom_lines": true, "bottom_non_empty_lines": true,
	"top_non_empty_lines": true, "after_last_horizontal_rule": false,
	"prompt_box_body": false, "above_prompt_box": false,
	"last_non_empty_above_prompt_box": false, "after_last_prompt_marker": false,
	"before_current_prompt_marker": false, "whole_recent_without_current_prompt_marker": false,
	"current_prompt_block_marker": false, "after_current_prompt_block_marker": false,
	"osc_title": false, "osc_progress": false,
}

func parseRegion(spec string) (region, error) {
	if spec == "" {
		return region{kind: "whole_recent"}, nil
	}
	name, arg, hasArg := strings.Cut(spec, "(")
	counted, known := regionKinds[name]
	if !known {
		return region{}, fmt.Errorf("unknown region %q", spec)
	}
	if counted != hasArg {
		return region{}, fmt.Errorf("region %q: %s takes a line count only where herdr's does", spec, name)
	}
	r := region{kind: name}
	if hasArg {
		num, ok := strings.CutSuffix(arg, ")")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 1 || n > 65535 || strings.HasPrefix(num, "0") {
			return region{}, fmt.Errorf("region %q: want a line count from 1 to 65535", spec)
		}
		r.n = n
	}
	return r, nil
}

func (r region) of(s Screen) string {
	lines := splitLines(s.Text)
	join := func(ls []string) string { return strings.Join(ls, "\n") }
	switch r.kind {
	case "osc_title":
		return s.Title
	case "osc_progress":
		return s.Progress
	case "bottom_lines":
		return join(lines[max(0, len(lines)-r.n):])
	case "bottom_non_empty_lines":
		seen := 0
		for i := len(lines) - 1; i >= 0; i-- {
			if strings.TrimSpace(lines[i]) != "" {
				if seen++; seen == r.n {
					return join(lines[i:])
				}
			}
		}
		return join(lines)
	case "top_non_empty_lines":
		seen := 0
		for i, l := range lines {
			if strings.TrimSpace(l) != "" {
				if seen++; seen == r.n {
					return join(lines[:i+1])
				}
			}
		}
		return join(lines)
	case "after_last_horizontal_rule":
		rules := ruleLines(lines)
		if len(rules) == 0 {
			return join(lines)
		}
		return join(lines[rules[len(rules)-1]+1:])
	case "prompt_box_body", "above_prompt_box", "last_non_empty_above_prompt_box":
		rules := ruleLines(lines)
		top := -1
		if len(rules) >= 2 {
			top = rules[len(rules)-2]
		}
		switch r.kind {
		case "prompt_box_body":
			if top < 0 {
				return ""
			}
			return join(lines[top+1 : rules[len(rules)-1]])
		case "above_prompt_box":
			if top < 0 {
				return join(lines)
			}
			return join(lines[:top])
		default:
			above := lines
			if top >= 0 {
				above = lines[:top]
			}
			for i := len(above) - 1; i >= 0; i-- {
				if strings.TrimSpace(above[i]) != "" {
					return above[i]
				}
			}
			return ""
		}
	case "after_last_prompt_marker":
		if i := lastIndex(lines, isPromptMarker); i >= 0 {
			return join(lines[i+1:])
		}
		return join(lines)
	case "before_current_prompt_marker":
		if i := currentPromptMarker(lines); i >= 0 {
			return join(lines[:i])
		}
		return join(lines)
	case "whole_recent_without_current_prompt_marker":
		if currentPromptMarker(lines) >= 0 {
			return ""
		}
		return join(lines)
	case "current_prompt_block_marker", "after_current_prompt_block_marker":
		cur := currentPromptMarker(lines)
		if cur < 0 {
			return ""
		}
		block := lastIndex(lines[:cur], isBlockMarker)
		if block < 0 {
			return ""
		}
		if r.kind == "current_prompt_block_marker" {
			return lines[block]
		}
		return join(lines[block:])
	}
	return s.Text
}

// ruleLines are the indexes of horizontal rule lines: a trimmed line that
// starts with ─ and is nothing else, or has at least three of them.
func ruleLines(lines []string) []int {
	var idx []int
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if rest, ok := strings.CutPrefix(t, "─"); ok && (rest == "" || strings.Count(t, "─") >= 3) {
			idx = append(idx, i)
		}
	}
	return idx
}

// isPromptMarker reports a Codex prompt line: › alone or followed by a space.
func isPromptMarker(l string) bool {
	t := strings.TrimSpace(l)
	return t == "›" || strings.HasPrefix(t, "› ")
}

// isBlockMarker reports a Codex transcript block's first line.
func isBlockMarker(l string) bool {
	t := strings.TrimLeft(l, " ")
	for _, m := range []string{"•", "■", "✗", "✓"} {
		if strings.HasPrefix(t, m) {
			return true
		}
	}
	return false
}

// currentPromptMarker is the last prompt line with no block marker after
// it, -1 when there is none.
func currentPromptMarker(lines []string) int {
	i := lastIndex(lines, isPromptMarker)
	if i < 0 || slices.ContainsFunc(lines[i+1:], isBlockMarker) {
		return -1
	}
	return i
}

func lastIndex(lines []string, f func(string) bool) int {
	for i := len(lines) - 1; i >= 0; i-- {
		if f(lines[i]) {
			return i
		}
	}
	return -1
}

// goRegexp translates the parts of Rust's regex syntax, which herdr's
// manifests are written in, that Go's does not share: \uXXXX and
// \UXXXXXXXX escapes, and the Alphabetic property.
func goRegexp(expr string) string {
	const alphabetic = `\p{L}\p{Nl}\p{Mn}\p{Mc}`
	var b strings.Builder
	inClass := false
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case c == '\\' && i+1 < len(expr):
			rest := expr[i+1:]
			switch {
			case rest[0] == 'u' && strings.HasPrefix(rest, "u{"):
				b.WriteString(`\x`)
				i++
				continue
			case (rest[0] == 'u' && len(rest) >= 5 && isHex(rest[1:5])):
				b.WriteString(`\x{` + rest[1:5] + `}`)
				i += 5
				continue
			case (rest[0] == 'U' && len(rest) >= 9 && isHex(rest[1:9])):
				b.WriteString(`\x{` + rest[1:9] + `}`)
				i += 9
				continue
			case strings.HasPrefix(rest, "p{Alphabetic}"):
				if inClass {
					b.WriteString(alphabetic)
				} else {
					b.WriteString("[" + alphabetic + "]")
				}
				i += len("p{Alphabetic}")
				continue
			}
			b.WriteByte(c)
			b.WriteByte(expr[i+1])
			i++
			continue
		case c == '[' && !inClass:
			inClass = true
		case c == ']' && inClass:
			inClass = false
		}
		b.WriteByte(c)
	}
	return b.String()
}

func isHex(s string) bool {
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}
