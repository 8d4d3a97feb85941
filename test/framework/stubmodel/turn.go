package stubmodel

import (
	"net/http"
	"strings"
	"time"
)

// Tools the scripted model calls, by what they do. Each API names them its
// own way (Claude Code: mcp__fleetd__bridge_reply, Bash).
const (
	toolReply = "bridge_reply"
	toolAsk   = "bridge_ask"
	toolShell = "shell"
	toolSend  = "bridge_send"
)

// step is the model's next answer in a turn.
type step struct {
	// delay comes before the answer.
	delay time.Duration
	// tool is the call to make; empty when the turn ends with text.
	tool  string
	input map[string]any
	// text is said before the call, or is the turn's last words.
	text string
}

// nextStep decides the model's next answer in a scripted turn, from the
// results of the tool calls the turn made so far. It keeps no state: the
// conversation the agent sends holds the turn's history.
func nextStep(script []Action, results []string) step {
	script = withFinalReply(script)
	var pending time.Duration
	var answer string
	call := 0
	sub := func(s string) string { return strings.ReplaceAll(s, "{answer}", answer) }
	for _, a := range script {
		switch {
		case a.Kind == ActSleep:
			pending += a.Delay
		case a.Kind == ActSilent:
			return step{delay: pending, text: sub(a.Arg)}
		case a.callsTool() && call < len(results):
			// Done earlier in the turn.
			if a.Kind == ActAsk {
				answer = answerOf(results[call])
			}
			call++
			pending = 0
		case a.Kind == ActReply:
			return step{delay: pending, tool: toolReply, input: map[string]any{"content": sub(a.Arg)}, text: "Replying."}
		case a.Kind == ActAsk:
			return step{delay: pending, tool: toolAsk, input: map[string]any{"content": sub(a.Arg)}, text: "Asking."}
		case a.Kind == ActBash:
			return step{delay: pending, tool: toolShell, input: map[string]any{"command": sub(a.Arg), "description": "Run the requested command"}, text: "Running it."}
		case a.Kind == ActSend:
			to, content, _ := strings.Cut(a.Arg, ":")
			return step{delay: pending, tool: toolSend, input: map[string]any{"sessionId": strings.TrimSpace(to), "content": strings.TrimSpace(sub(content)), "wait": false}, text: "Sending it."}
		}
	}
	return step{delay: pending, text: "Done."}
}

// withFinalReply makes a script whose last question is not followed by a
// reply or another question reply with the answer itself.
func withFinalReply(script []Action) []Action {
	last := -1
	for i, a := range script {
		if a.Kind == ActAsk || a.Kind == ActReply || a.Kind == ActSilent {
			last = i
		}
	}
	if last >= 0 && script[last].Kind == ActAsk {
		return append(script[:len(script):len(script)], Action{Kind: ActReply, Arg: "{answer}"})
	}
	return script
}

// stepOf is the model's next answer in the turn that prompt starts, after
// its tool calls' results so far: a prompt the script language refuses is
// answered with why. It waits out the step's delay first; ok is false when
// the client went away meanwhile.
func stepOf(r *http.Request, prompt string, results []string) (next step, ok bool) {
	script, err := Script(prompt)
	if err != nil {
		return step{text: "I cannot follow that: " + err.Error()}, true
	}
	next = nextStep(script, results)
	return next, sleep(r, next.delay)
}
