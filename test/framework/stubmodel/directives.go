package stubmodel

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ActionKind is one thing the scripted model does in a turn.
type ActionKind string

// Actions, each written in a prompt as a directive line "keyword: argument".
const (
	// ActReply calls fleetd's bridge_reply with the argument.
	ActReply ActionKind = "reply"
	// ActAsk calls fleetd's bridge_ask with the argument; {answer} in later
	// arguments is replaced by the answer.
	ActAsk ActionKind = "ask"
	// ActSilent answers with the argument as text and ends the turn
	// without replying.
	ActSilent ActionKind = "silent"
	// ActSleep takes the argument's seconds before the next step: a model
	// that works slowly.
	ActSleep ActionKind = "sleep"
	// ActBash runs the argument with the agent's shell tool, which needs
	// permission unless the agent's configuration allows it.
	ActBash ActionKind = "bash"
	// ActSend hands work to a member, as a primary does: bridge_send with
	// wait:false; the argument is "MEMBER: CONTENT".
	ActSend ActionKind = "send"
)

// Action is one step of a scripted turn.
type Action struct {
	Kind ActionKind
	Arg  string
	// Delay is the pause of a sleep.
	Delay time.Duration
}

// callsTool says whether the action is a tool call, which the agent answers
// with a tool result before the script goes on.
func (a Action) callsTool() bool {
	return a.Kind == ActReply || a.Kind == ActAsk || a.Kind == ActBash || a.Kind == ActSend
}

// Script is what the scripted model does with one prompt. A prompt without
// directives gets a reply of "echo: " and the prompt.
func Script(prompt string) ([]Action, error) {
	var script []Action
	for _, line := range strings.Split(prompt, "\n") {
		keyword, arg, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		kind := ActionKind(strings.ToLower(strings.TrimSpace(keyword)))
		arg = strings.TrimSpace(arg)
		switch kind {
		case ActReply, ActAsk, ActSilent, ActBash:
			if arg == "" {
				return nil, fmt.Errorf("directive %s: needs an argument", kind)
			}
			script = append(script, Action{Kind: kind, Arg: arg})
		case ActSend:
			if to, content, ok := strings.Cut(arg, ":"); !ok || strings.TrimSpace(to) == "" || strings.TrimSpace(content) == "" {
				return nil, fmt.Errorf("directive send: want MEMBER: CONTENT, got %q", arg)
			}
			script = append(script, Action{Kind: kind, Arg: arg})
		case ActSleep:
			secs, err := strconv.ParseFloat(arg, 64)
			if err != nil || secs < 0 || secs > 3600 {
				return nil, fmt.Errorf("directive sleep: %q is not a number of seconds from 0 to 3600", arg)
			}
			script = append(script, Action{Kind: kind, Arg: arg, Delay: time.Duration(secs * float64(time.Second))})
		}
	}
	if len(script) == 0 {
		script = []Action{{Kind: ActReply, Arg: "echo: " + strings.TrimSpace(prompt)}}
	}
	return script, nil
}

// answerOf is the answer in the result of a bridge_ask: its structured
// answer when the result is the gateway's JSON, else the whole text.
func answerOf(result string) string {
	var out struct {
		Answer *string `json:"answer"`
	}
	if json.Unmarshal([]byte(result), &out) == nil && out.Answer != nil {
		return *out.Answer
	}
	return result
}
