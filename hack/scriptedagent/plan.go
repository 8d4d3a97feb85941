package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// stepKind names what one directive does.
type stepKind int

const (
	// stepReply calls bridge_reply with Text.
	stepReply stepKind = iota + 1
	// stepAsk calls bridge_ask with Text and remembers the answer.
	stepAsk
	// stepSilent prints Text and nothing else.
	stepSilent
	// stepSleep works for Duration.
	stepSleep
	// stepDialog shows Text as a blocking dialog until a key is pressed.
	stepDialog
	// stepCrash exits at once with the non-zero Code.
	stepCrash
	// stepExit exits at once with Code, which may be zero.
	stepExit
)

// String returns the directive keyword of k.
func (k stepKind) String() string {
	switch k {
	case stepReply:
		return "reply"
	case stepAsk:
		return "ask"
	case stepSilent:
		return "silent"
	case stepSleep:
		return "sleep"
	case stepDialog:
		return "dialog"
	case stepCrash:
		return "crash"
	case stepExit:
		return "exit"
	}
	return fmt.Sprintf("stepKind(%d)", int(k))
}

// keywords maps each directive keyword to its kind.
var keywords = map[string]stepKind{
	"reply":  stepReply,
	"ask":    stepAsk,
	"silent": stepSilent,
	"sleep":  stepSleep,
	"dialog": stepDialog,
	"crash":  stepCrash,
	"exit":   stepExit,
}

// answerPlaceholder is replaced by the latest bridge_ask answer in the
// arguments of the steps that follow the ask.
const answerPlaceholder = "{answer}"

// step is one directive of a prompt, ready to run.
type step struct {
	// Kind is what the step does.
	Kind stepKind
	// Text is the argument of reply, ask, silent and dialog.
	Text string
	// Duration is how long a sleep step works.
	Duration time.Duration
	// Code is the exit status of crash and exit steps.
	Code int
	// ReplyWithAnswer is set on an ask after which nothing in the prompt
	// replies or asks again, so that the answer itself becomes the reply and
	// an ask-only prompt still settles its delegation with a reply.
	ReplyWithAnswer bool
}

// plan is what the agent does with one prompt: its steps, in order.
type plan struct {
	// Steps run in order; an empty plan just ends the turn.
	Steps []step
}

// echoPrefix starts the reply to a prompt that holds no directive.
const echoPrefix = "echo: "

// parsePlan turns a prompt into the steps the agent runs. Each line that
// reads `keyword: argument` with a known keyword (case-insensitive) is a
// directive; `crash` and `exit` may also stand alone. Other lines are plain
// text. A prompt with no directive at all is answered with one reply,
// "echo: " and the prompt, so a plain message always gets an answer. Every
// malformed directive is reported in the returned error, and then no step
// runs: a half-run script would make a test's failure harder to read.
func parsePlan(text string) (plan, error) {
	var (
		p    plan
		errs []error
	)
	for i, line := range strings.Split(text, "\n") {
		kind, arg, ok := splitDirective(line)
		if !ok {
			continue
		}
		s, err := newStep(kind, arg)
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %s: %w", i+1, kind, err))
			continue
		}
		p.Steps = append(p.Steps, s)
	}
	if err := errors.Join(errs...); err != nil {
		return plan{}, err
	}
	if len(p.Steps) == 0 {
		if trimmed := strings.TrimSpace(text); trimmed != "" {
			p.Steps = []step{{Kind: stepReply, Text: echoPrefix + trimmed}}
		}
		return p, nil
	}
	markAutoReplies(p.Steps)
	return p, nil
}

// splitDirective reports whether line is a directive, and if so its kind and
// trimmed argument.
func splitDirective(line string) (stepKind, string, bool) {
	line = strings.TrimSpace(line)
	head, arg, found := strings.Cut(line, ":")
	kind, known := keywords[strings.ToLower(strings.TrimSpace(head))]
	if !known {
		return 0, "", false
	}
	if !found {
		// Only the directives that need no argument may omit the colon, so
		// that a line such as "Reply" in prose stays prose.
		if kind != stepCrash && kind != stepExit {
			return 0, "", false
		}
		return kind, "", true
	}
	return kind, strings.TrimSpace(arg), true
}

// newStep validates the argument of a directive of the given kind.
func newStep(kind stepKind, arg string) (step, error) {
	s := step{Kind: kind}
	switch kind {
	case stepReply, stepAsk, stepSilent, stepDialog:
		s.Text = arg
	case stepSleep:
		secs, err := strconv.ParseFloat(arg, 64)
		if err != nil || secs < 0 || math.IsInf(secs, 0) || math.IsNaN(secs) {
			return step{}, fmt.Errorf("want a number of seconds such as 1.5, got %q", arg)
		}
		s.Duration = time.Duration(secs * float64(time.Second))
	case stepCrash:
		s.Code = 1
		if arg != "" {
			code, err := strconv.Atoi(arg)
			if err != nil || code < 1 || code > 255 {
				return step{}, fmt.Errorf("want an exit status from 1 to 255, got %q", arg)
			}
			s.Code = code
		}
	case stepExit:
		if arg != "" {
			code, err := strconv.Atoi(arg)
			if err != nil || code < 0 || code > 255 {
				return step{}, fmt.Errorf("want an exit status from 0 to 255, got %q", arg)
			}
			s.Code = code
		}
	}
	return s, nil
}

// markAutoReplies sets ReplyWithAnswer on every ask that no later reply or
// ask follows.
func markAutoReplies(steps []step) {
	answered := false
	for i := len(steps) - 1; i >= 0; i-- {
		switch steps[i].Kind {
		case stepReply:
			answered = true
		case stepAsk:
			steps[i].ReplyWithAnswer = !answered
			answered = true
		}
	}
}
