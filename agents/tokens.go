package agents

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/memberfs"
	"github.com/fleetd/fleetd/internal/textcut"
)

// TranscriptChunk is how much of a transcript one reading counts at most:
// a long transcript is caught up with over several readings, each from
// where the last stopped.
const TranscriptChunk = 4 << 20

// TokenCount is what counting a transcript from a cursor on found.
type TokenCount struct {
	// Cursor is where the next counting starts.
	Cursor fleetv1alpha1.TranscriptCursor `json:"cursor"`
	// Added is what the transcript gained since the old cursor.
	Added fleetv1alpha1.TokenUsage `json:"added"`
	// More says the transcript holds more than this reading counted.
	More bool `json:"more,omitempty"`
	// Turns are the turns this reading saw start, in order, each with what
	// its calls used within the reading. What Added holds beyond them
	// continued the turn under way when the reading began (Continued).
	Turns []TurnCount `json:"turns,omitempty"`
}

// TurnCount is a turn of the agent's transcript: a prompt, and what the
// model calls after it used, up to the next prompt.
type TurnCount struct {
	// Prompt is the prompt's text, its first MaxPromptBytes.
	Prompt string `json:"prompt"`
	// Added is what the turn's calls used.
	Added fleetv1alpha1.TokenUsage `json:"added"`
}

// MaxPromptBytes bounds the prompt text a TurnCount keeps: enough to tell
// which message was typed.
const MaxPromptBytes = 2048

// Continued is what the reading added to the turn under way when it
// began: Added less the turns it saw start.
func (c TokenCount) Continued() fleetv1alpha1.TokenUsage {
	rest := c.Added
	for _, t := range c.Turns {
		rest = minusSigned(rest, t.Added)
	}
	return rest
}

// CountTokens counts the tokens the agent's transcript gained since
// cursor: Claude Code's session lines, or Codex's rollout. A cursor on
// another transcript (a new session) starts over at the new one's first
// byte, and so does one past its end (the file was replaced). The
// transcript must lie within dir, the member's agent directory. ok is
// false for an agent kind that keeps no usage fleetd reads, or a
// transcript that does not exist (yet).
func CountTokens(kind fleetv1alpha1.AgentKind, dir, transcript string, cursor fleetv1alpha1.TranscriptCursor) (TokenCount, bool, error) {
	if kind != fleetv1alpha1.AgentClaude && kind != fleetv1alpha1.AgentCodex {
		return TokenCount{}, false, nil
	}
	if !within(dir, transcript) {
		return TokenCount{}, false, errors.New("transcript " + transcript + " is not within the agent directory " + dir)
	}
	if cursor.Path != transcript {
		cursor = fleetv1alpha1.TranscriptCursor{Path: transcript}
	}
	chunk, size, err := memberfs.ReadRangeWithin(dir, transcript, cursor.Offset, TranscriptChunk)
	if errors.Is(err, os.ErrNotExist) {
		return TokenCount{}, false, nil
	}
	if err != nil {
		return TokenCount{}, false, err
	}
	if size < cursor.Offset {
		cursor = fleetv1alpha1.TranscriptCursor{Path: transcript}
		if chunk, size, err = memberfs.ReadRangeWithin(dir, transcript, 0, TranscriptChunk); err != nil {
			return TokenCount{}, false, err
		}
	}
	full := int64(len(chunk)) == TranscriptChunk
	next, added, turns := CountChunk(kind, cursor, chunk, full)
	return TokenCount{Cursor: next, Added: added, Turns: turns, More: next.Offset < size}, true, nil
}

// CountChunk counts chunk, the bytes of a transcript of kind from
// cursor.Offset on, and says where the next chunk starts, what this one
// added, and the turns it saw start (each prompt, and what the calls after
// it used). Only whole lines count: a line still being written is left
// for the next chunk. full says chunk is as long as a reading gets: a
// line longer than that is passed over, its rest failing to parse in the
// next chunk.
func CountChunk(kind fleetv1alpha1.AgentKind, cursor fleetv1alpha1.TranscriptCursor, chunk []byte, full bool) (fleetv1alpha1.TranscriptCursor, fleetv1alpha1.TokenUsage, []TurnCount) {
	var (
		added fleetv1alpha1.TokenUsage
		turns []TurnCount
	)
	end := bytes.LastIndexByte(chunk, '\n') + 1
	if end == 0 && full {
		cursor.Offset += int64(len(chunk))
		return cursor, added, nil
	}
	count, prompt := countClaudeLine, claudePrompt
	if kind == fleetv1alpha1.AgentCodex {
		count, prompt = countCodexLine, codexPrompt
	}
	eachLine(chunk[:end], func(line []byte) {
		if text, ok := prompt(line); ok {
			turns = append(turns, TurnCount{Prompt: textcut.Head(text, MaxPromptBytes)})
			return
		}
		call := count(&cursor, line)
		added = plusSigned(added, call)
		if len(turns) > 0 {
			turns[len(turns)-1].Added = plusSigned(turns[len(turns)-1].Added, call)
		}
	})
	cursor.Offset += int64(end)
	return cursor, added, turns
}

// claudePrompt says whether a line of a Claude Code transcript is a
// prompt, and its text: a user message of text, not a tool's result, nor
// one Claude Code wrote for itself (isMeta) or a subagent's
// (isSidechain).
func claudePrompt(line []byte) (string, bool) {
	var e struct {
		Type        string `json:"type"`
		IsMeta      bool   `json:"isMeta"`
		IsSidechain bool   `json:"isSidechain"`
		Message     struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	}
	if json.Unmarshal(line, &e) != nil || e.Type != "user" || e.IsMeta || e.IsSidechain || len(e.Message.Content) == 0 {
		return "", false
	}
	var text string
	if json.Unmarshal(e.Message.Content, &text) == nil {
		return text, true
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(e.Message.Content, &blocks) != nil {
		return "", false
	}
	var b strings.Builder
	for _, bl := range blocks {
		switch bl.Type {
		case "tool_result":
			return "", false
		case "text":
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(bl.Text)
		}
	}
	return b.String(), true
}

// codexPrompt says whether a line of a Codex rollout is a prompt, and its
// text. Codex records a typed prompt as a completed UserMessage item (the
// pinned CLI) or, in earlier releases, as a user_message event; both are
// read, so that a member on either release counts its messages.
func codexPrompt(line []byte) (string, bool) {
	var e struct {
		Type    string `json:"type"`
		Payload struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Item    struct {
				Type    string `json:"type"`
				Content []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
			} `json:"item"`
		} `json:"payload"`
	}
	if json.Unmarshal(line, &e) != nil || e.Type != "event_msg" {
		return "", false
	}
	switch {
	case e.Payload.Type == "user_message":
		return e.Payload.Message, true
	case e.Payload.Type == "item_completed" && e.Payload.Item.Type == "UserMessage":
		var b strings.Builder
		for _, c := range e.Payload.Item.Content {
			if c.Type != "text" {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(c.Text)
		}
		return b.String(), true
	}
	return "", false
}

// countClaudeLine counts one line of a Claude Code transcript. Claude Code
// writes a line per part of a model call (thinking, text, each tool use),
// each with the call's usage under the call's message id: a line of the
// call counted last replaces what that call counted.
func countClaudeLine(c *fleetv1alpha1.TranscriptCursor, line []byte) fleetv1alpha1.TokenUsage {
	var e struct {
		Type    string `json:"type"`
		Message struct {
			ID    string `json:"id"`
			Model string `json:"model"`
			Usage *struct {
				InputTokens              int64 `json:"input_tokens"`
				CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
				CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
				OutputTokens             int64 `json:"output_tokens"`
			} `json:"usage"`
		} `json:"message"`
	}
	if json.Unmarshal(line, &e) != nil || e.Type != "assistant" || e.Message.Usage == nil || e.Message.Model == "<synthetic>" {
		return fleetv1alpha1.TokenUsage{}
	}
	us := e.Message.Usage
	call := fleetv1alpha1.TokenUsage{
		InputTokens: us.InputTokens, OutputTokens: us.OutputTokens,
		CachedTokens: us.CacheReadInputTokens, CacheCreationTokens: us.CacheCreationInputTokens, Calls: 1,
	}
	id := e.Message.ID
	if len(id) > 256 {
		id = id[:256]
	}
	added := call
	if id != "" && id == c.LastID {
		added = minusSigned(call, c.Last)
	}
	c.LastID, c.Last = id, call
	return added
}

// countCodexLine counts one line of a Codex rollout: its token_count
// events carry the session's running total, so a total counts what it
// gained on the one before. Codex's input includes the cached input;
// fleetd counts them apart.
func countCodexLine(c *fleetv1alpha1.TranscriptCursor, line []byte) fleetv1alpha1.TokenUsage {
	var e struct {
		Type    string `json:"type"`
		Payload struct {
			Type string `json:"type"`
			Info *struct {
				Total *struct {
					InputTokens       int64 `json:"input_tokens"`
					CachedInputTokens int64 `json:"cached_input_tokens"`
					OutputTokens      int64 `json:"output_tokens"`
				} `json:"total_token_usage"`
			} `json:"info"`
		} `json:"payload"`
	}
	if json.Unmarshal(line, &e) != nil || e.Type != "event_msg" || e.Payload.Type != "token_count" || e.Payload.Info == nil || e.Payload.Info.Total == nil {
		return fleetv1alpha1.TokenUsage{}
	}
	t := e.Payload.Info.Total
	total := fleetv1alpha1.TokenUsage{InputTokens: t.InputTokens - t.CachedInputTokens, CachedTokens: t.CachedInputTokens, OutputTokens: t.OutputTokens}
	prev := c.Last
	prev.Calls = 0
	if total == prev {
		// Codex repeats its total with other news (rate limits).
		return fleetv1alpha1.TokenUsage{}
	}
	total.Calls = c.Last.Calls + 1
	added := total.Minus(c.Last)
	c.Last = total
	return added
}

// plusSigned is a+b, each count possibly negative: what a chunk added
// may take back what an earlier chunk counted, and only a Member's total
// stops at zero.
func plusSigned(a, b fleetv1alpha1.TokenUsage) fleetv1alpha1.TokenUsage {
	return fleetv1alpha1.TokenUsage{
		InputTokens: a.InputTokens + b.InputTokens, OutputTokens: a.OutputTokens + b.OutputTokens,
		CachedTokens: a.CachedTokens + b.CachedTokens, CacheCreationTokens: a.CacheCreationTokens + b.CacheCreationTokens,
		Calls: a.Calls + b.Calls,
	}
}

// minusSigned is a-b, each count possibly negative: a later line of a call
// that counted fewer tokens takes them back.
func minusSigned(a, b fleetv1alpha1.TokenUsage) fleetv1alpha1.TokenUsage {
	return fleetv1alpha1.TokenUsage{
		InputTokens: a.InputTokens - b.InputTokens, OutputTokens: a.OutputTokens - b.OutputTokens,
		CachedTokens: a.CachedTokens - b.CachedTokens, CacheCreationTokens: a.CacheCreationTokens - b.CacheCreationTokens,
		Calls: a.Calls - b.Calls,
	}
}
