package ociimage

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A small Dockerfile parser for the tests that hold the Dockerfile to
// `make images`: BuildKit's own parser would bring BuildKit into the
// module graph. It reads what the reference documents for the default
// escape character: parser directives, comments (also inside a
// continued instruction), backslash continuations, flags, JSON and shell
// forms, and both ENV forms. What it cannot read (another escape
// character, heredocs) it refuses rather than guesses.

// dockerInstruction is one instruction, its continuations joined.
type dockerInstruction struct {
	// Line is the line it starts on, from 1.
	Line int
	// Cmd is the instruction's name, upper-cased.
	Cmd string
	// Flags are its --name=value flags (FROM, RUN, COPY, ADD).
	Flags map[string]string
	// Args are the JSON form's elements, or the shell form's words.
	Args []string
	// JSON says the instruction was written in the JSON (exec) form.
	JSON bool
	// Raw is the text after the name and flags.
	Raw string
}

// dockerStage is a FROM and the instructions up to the next.
type dockerStage struct {
	// Name is the stage's AS name, or its index when it has none.
	Name string
	// From is the image or stage it starts from.
	From         string
	Instructions []dockerInstruction
}

var dockerFlagged = map[string]bool{"FROM": true, "RUN": true, "COPY": true, "ADD": true}

var dockerJSONForm = map[string]bool{"RUN": true, "CMD": true, "ENTRYPOINT": true, "COPY": true, "ADD": true, "SHELL": true, "VOLUME": true}

// parseDockerfile splits text into stages of instructions.
func parseDockerfile(text string) ([]dockerStage, error) {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	i := 0
	// Parser directives: `# key=value` lines before anything else.
	for ; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "#") {
			break
		}
		k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(l, "#")), "=")
		if !ok || strings.ContainsAny(strings.TrimSpace(k), " \t") {
			break
		}
		if strings.EqualFold(strings.TrimSpace(k), "escape") && strings.TrimSpace(v) != `\` {
			return nil, fmt.Errorf("line %d: escape character %q: only the default is read", i+1, strings.TrimSpace(v))
		}
	}
	var ins []dockerInstruction
	var cur strings.Builder
	start := 0
	for ; i < len(lines); i++ {
		l := lines[i]
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "#") || (t == "" && cur.Len() > 0) {
			// A comment is dropped even inside a continued instruction, as is
			// an empty continuation line.
			continue
		}
		if t == "" {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		body := strings.TrimRight(l, " \t")
		if strings.HasSuffix(body, `\`) {
			cur.WriteString(strings.TrimSuffix(body, `\`))
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(body)
		in, err := parseDockerInstruction(start, cur.String())
		if err != nil {
			return nil, err
		}
		ins = append(ins, in)
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: the file ends inside a continued instruction", start)
	}
	var stages []dockerStage
	for _, in := range ins {
		switch {
		case in.Cmd == "FROM":
			s := dockerStage{Name: fmt.Sprint(len(stages))}
			switch {
			case len(in.Args) == 1:
			case len(in.Args) == 3 && strings.EqualFold(in.Args[1], "AS"):
				s.Name = strings.ToLower(in.Args[2])
			default:
				return nil, fmt.Errorf("line %d: FROM %s: want an image and an optional AS name", in.Line, in.Raw)
			}
			s.From = in.Args[0]
			stages = append(stages, s)
		case len(stages) == 0:
			if in.Cmd != "ARG" {
				return nil, fmt.Errorf("line %d: %s before the first FROM", in.Line, in.Cmd)
			}
		default:
			stages[len(stages)-1].Instructions = append(stages[len(stages)-1].Instructions, in)
		}
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	return stages, nil
}

func parseDockerInstruction(line int, text string) (dockerInstruction, error) {
	text = strings.TrimSpace(text)
	name, rest, _ := strings.Cut(text, " ")
	in := dockerInstruction{Line: line, Cmd: strings.ToUpper(name), Flags: map[string]string{}}
	rest = strings.TrimSpace(rest)
	if dockerFlagged[in.Cmd] {
		for strings.HasPrefix(rest, "--") {
			flag, after, _ := strings.Cut(rest, " ")
			k, v, _ := strings.Cut(strings.TrimPrefix(flag, "--"), "=")
			if _, dup := in.Flags[k]; dup && k != "mount" {
				return in, fmt.Errorf("line %d: %s: flag --%s twice", line, in.Cmd, k)
			}
			in.Flags[k] = v
			rest = strings.TrimSpace(after)
		}
	}
	in.Raw = rest
	if (in.Cmd == "RUN" || in.Cmd == "COPY" || in.Cmd == "ADD") && strings.Contains(rest, "<<") {
		return in, fmt.Errorf("line %d: %s with a heredoc: not read", line, in.Cmd)
	}
	if dockerJSONForm[in.Cmd] && strings.HasPrefix(rest, "[") {
		var args []string
		if err := json.Unmarshal([]byte(rest), &args); err == nil {
			in.Args, in.JSON = args, true
			return in, nil
		}
	}
	words, err := shellWords(rest)
	if err != nil {
		return in, fmt.Errorf("line %d: %s: %w", line, in.Cmd, err)
	}
	in.Args = words
	return in, nil
}

// shellWords splits s into words as a POSIX shell does, without
// expansion: whitespace separates, quotes group, a backslash outside
// single quotes takes the next character; &&, ||, ; and | are words of
// their own.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			flush()
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '"':
			inWord = true
			for i++; ; i++ {
				if i >= len(s) {
					return nil, fmt.Errorf("unclosed \" in %q", s)
				}
				if s[i] == '"' {
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		case c == ';' || c == '|' || c == '&':
			flush()
			op := string(c)
			if (c == '&' || c == '|') && i+1 < len(s) && s[i+1] == c {
				op += string(c)
				i++
			}
			words = append(words, op)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words, nil
}

// shellCommands splits shell words into simple commands at &&, ||, ; and |.
func shellCommands(words []string) [][]string {
	var cmds [][]string
	var cur []string
	for _, w := range words {
		switch w {
		case "&&", "||", ";", "|", "&":
			if len(cur) > 0 {
				cmds = append(cmds, cur)
			}
			cur = nil
		default:
			cur = append(cur, w)
		}
	}
	if len(cur) > 0 {
		cmds = append(cmds, cur)
	}
	return cmds
}

// envPairs reads ENV's arguments: key=value words, or the older
// `ENV key the rest`.
func envPairs(in dockerInstruction) ([][2]string, error) {
	if len(in.Args) == 0 {
		return nil, fmt.Errorf("line %d: ENV with nothing", in.Line)
	}
	if !strings.Contains(in.Args[0], "=") {
		k, v, _ := strings.Cut(in.Raw, " ")
		return [][2]string{{k, strings.TrimSpace(v)}}, nil
	}
	var out [][2]string
	for _, w := range in.Args {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: ENV %q: mixes key=value and the older form", in.Line, w)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

func TestParseDockerfile(t *testing.T) {
	text := `# syntax=docker/dockerfile:1
# escape=\
ARG GO=1
FROM golang:1.26 AS Build
# a comment
RUN --mount=type=cache,target=/a --mount=type=cache,target=/b \
    echo "a  b" && \
# a comment inside the instruction

    go build -o /out/x ./cmd/x
COPY ["a b", "c/"]
from build
ENV A=1 B="two words" C=x\ y
ENV D the rest of it
ENTRYPOINT ["/x"]
CMD /bin/sh -c 'echo hi'
`
	stages, err := parseDockerfile(text)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Name, From string
		Cmds       []string
	}
	var all []got
	for _, s := range stages {
		g := got{Name: s.Name, From: s.From}
		for _, in := range s.Instructions {
			g.Cmds = append(g.Cmds, fmt.Sprintf("%d %s %v %q json=%v", in.Line, in.Cmd, in.Flags, in.Args, in.JSON))
		}
		all = append(all, g)
	}
	want := []got{
		{Name: "build", From: "golang:1.26", Cmds: []string{
			`6 RUN map[mount:type=cache,target=/b] ["echo" "a  b" "&&" "go" "build" "-o" "/out/x" "./cmd/x"] json=false`,
			`11 COPY map[] ["a b" "c/"] json=true`,
		}},
		{Name: "1", From: "build", Cmds: []string{
			`13 ENV map[] ["A=1" "B=two words" "C=x y"] json=false`,
			`14 ENV map[] ["D" "the" "rest" "of" "it"] json=false`,
			`15 ENTRYPOINT map[] ["/x"] json=true`,
			`16 CMD map[] ["/bin/sh" "-c" "echo hi"] json=false`,
		}},
	}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
	env, err := envPairs(stages[1].Instructions[1])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][2]string{{"D", "the rest of it"}}, env); diff != "" {
		t.Errorf("older ENV form (-want +got):\n%s", diff)
	}
	if got, want := shellCommands(stages[0].Instructions[0].Args), [][]string{{"echo", "a  b"}, {"go", "build", "-o", "/out/x", "./cmd/x"}}; !cmp.Equal(got, want) {
		t.Errorf("commands: got %q, want %q", got, want)
	}

	for name, bad := range map[string]string{
		"another escape":  "# escape=`\nFROM a\n",
		"heredoc":         "FROM a\nRUN <<EOF\necho\nEOF\n",
		"unclosed quote":  "FROM a\nENV A=\"b\n",
		"ends continued":  "FROM a\nRUN echo \\\n",
		"before any FROM": "RUN echo\nFROM a\n",
	} {
		if _, err := parseDockerfile(bad); err == nil {
			t.Errorf("%s: parsed, want an error", name)
		}
	}
}
