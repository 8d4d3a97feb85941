package agents

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleetd/fleetd/internal/textcut"
)

// A primary outside any pane (a Claude Code or Codex on a laptop) sends
// with wait:false and ends its turn; no pane is there to type the replies
// into. Its Stop hook collects them instead: when the turn stops with
// outcomes waiting, the hook keeps the turn going with them as the reason
// (the "block" decision both CLIs take from a Stop hook), and acknowledges
// them; otherwise it lets the turn end.

// maxStopReason bounds the reason a primary's Stop hook gives: what does
// not fit waits for the next stop.
const maxStopReason = 64 << 10

// maxStopText bounds one outcome's or question's text in the reason.
const maxStopText = 16 << 10

// PrimaryOutcome is a settled message of the primary's that nobody waited
// for, as bridge_poll shows it.
type PrimaryOutcome struct {
	DispatchID string        `json:"dispatchId"`
	Member     string        `json:"member"`
	Outcome    string        `json:"outcome"`
	Text       string        `json:"text,omitempty"`
	Error      *PrimaryError `json:"error,omitempty"`
	Content    string        `json:"content,omitempty"`
	SettledAt  string        `json:"settledAt,omitempty"`
}

// PrimaryError is why a message failed, as bridge_poll shows it.
type PrimaryError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// PrimaryQuestion is a worker's open question to the primary.
type PrimaryQuestion struct {
	TurnID string `json:"turnId"`
	Member string `json:"member"`
	Text   string `json:"text"`
}

// StopDecision is what a Stop hook prints: {"decision":"block","reason"}
// keeps the agent going with the reason as its next input; nothing lets
// the turn end.
type StopDecision struct {
	Decision string `json:"decision,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Block reports whether the decision keeps the turn going.
func (d StopDecision) Block() bool { return d.Decision == "block" }

// maxStopOutcomes bounds how many outcomes one stop hands over: a token
// shared by many clients may have dozens waiting.
const maxStopOutcomes = 20

// PrimaryStop decides a primary's Stop hook: with outcomes waiting, block
// with them as the reason, and acknowledge the ones it names (ack). It
// hands over at most maxStopOutcomes, newest first, and says how many more
// wait in bridge_poll. When sends shows which messages this CLI session
// sent (Known), it hands over only their outcomes, and leaves the rest of
// the token's for bridge_poll; otherwise any of the token's. Open
// questions keep the turn going too, but only once per turn
// (stopHookActive says the turn already goes on from a Stop hook): they
// stay open until answered, and would otherwise never let it end.
func PrimaryStop(stopHookActive bool, outcomes []PrimaryOutcome, questions []PrimaryQuestion, sends SessionSends) (d StopDecision, ack []string) {
	if stopHookActive {
		questions = nil
	}
	eligible := newestFirst(outcomes)
	if sends.Known {
		eligible = slices.DeleteFunc(eligible, func(o PrimaryOutcome) bool { return !sends.DispatchIDs[o.DispatchID] })
	}
	if len(eligible) == 0 && len(questions) == 0 {
		return StopDecision{}, nil
	}
	var b strings.Builder
	b.WriteString("fleetd: while you were stopping, members answered messages you sent with wait:false.")
	if len(eligible) > 0 {
		b.WriteString(" These outcomes are acknowledged: bridge_poll will not show them again.\n")
	} else {
		b.WriteString("\n")
	}
	for _, o := range eligible {
		entry := "\n" + outcomeLine(o)
		if len(ack) == maxStopOutcomes || (b.Len()+len(entry) > maxStopReason && len(ack) > 0) {
			break
		}
		b.WriteString(entry)
		ack = append(ack, o.DispatchID)
	}
	if len(questions) > 0 {
		b.WriteString("\n\nOpen questions; answer each with bridge_send {turnId, content}:")
		for _, q := range questions {
			entry := fmt.Sprintf("\n- %s asks (turnId %s): %s", q.Member, q.TurnID, textcut.Head(q.Text, maxStopText))
			if b.Len()+len(entry) > maxStopReason {
				break
			}
			b.WriteString(entry)
		}
	}
	if more := len(outcomes) - len(ack); more > 0 && len(ack) > 0 {
		if sends.Known {
			mine := len(eligible) - len(ack)
			fmt.Fprintf(&b, "\n\n%d more outcomes wait in bridge_poll: %d of messages this session sent, %d of messages sent before it or by other clients with the same token; bridge_ack clears them.", more, mine, more-mine)
		} else {
			fmt.Fprintf(&b, "\n\n%d more outcomes wait in bridge_poll; bridge_ack clears them.", more)
		}
	}
	return StopDecision{Decision: "block", Reason: b.String()}, ack
}

// newestFirst orders outcomes by when they settled, newest first; bridge_poll
// lists them oldest first, and that order decides between equal times
// (an outcome with no time counts as the oldest).
func newestFirst(outcomes []PrimaryOutcome) []PrimaryOutcome {
	out := slices.Clone(outcomes)
	slices.Reverse(out)
	settled := func(o PrimaryOutcome) time.Time {
		t, _ := time.Parse(time.RFC3339Nano, o.SettledAt)
		return t
	}
	slices.SortStableFunc(out, func(a, b PrimaryOutcome) int { return settled(b).Compare(settled(a)) })
	return out
}

// outcomeLine is one outcome as the model reads it.
func outcomeLine(o PrimaryOutcome) string {
	about := ""
	if o.Content != "" {
		about = fmt.Sprintf(" (your message: %q)", textcut.Head(o.Content, 200))
	}
	text := textcut.Head(o.Text, maxStopText)
	switch {
	case o.Outcome == "reply":
		return fmt.Sprintf("- %s replied to %s%s:\n%s", o.Member, o.DispatchID, about, text)
	case o.Outcome == "turn_done":
		return fmt.Sprintf("- %s ended its turn on %s%s without replying; its terminal's last lines:\n%s", o.Member, o.DispatchID, about, text)
	case o.Error != nil:
		return fmt.Sprintf("- %s: %s%s failed: %s: %s", o.Member, o.DispatchID, about, o.Error.Code, textcut.Head(o.Error.Message, maxStopText))
	}
	return fmt.Sprintf("- %s: %s%s ended %s. %s", o.Member, o.DispatchID, about, o.Outcome, text)
}

// CodexHookTrust is how Codex records that a person trusted a hook of the
// config file configPath: the key of its table in [hooks.state] and the
// hash to set there as trusted_hash. With it, Codex runs the hook without
// its "Hooks need review" screen.
func CodexHookTrust(configPath, event, command string) (key, hash string, err error) {
	for _, ev := range codexHookEvents {
		if ev.name == event {
			hash, err := codexHookHash(ev.key, command)
			return fmt.Sprintf("%s:%s:0:0", configPath, ev.key), hash, err
		}
	}
	return "", "", fmt.Errorf("codex has no hook event %q fleetd knows", event)
}
