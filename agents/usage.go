package agents

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/memberfs"
)

// ClaudeContextWindow is the context window of the Claude models fleetd
// runs, in tokens. Models with a larger window say so in their name
// ("[1m]").
const ClaudeContextWindow = 200_000

// transcriptTail is how much of a transcript's end is read for its latest
// usage: one model call's entry is far smaller.
const transcriptTail = 512 << 10

// ContextUsage is how much of its context window an agent's session used at
// its latest model call.
type ContextUsage struct {
	// Used and Window are in tokens.
	Used, Window int64
}

// RemainingPercent is the share of the window left, 0 to 100.
func (u ContextUsage) RemainingPercent() int32 {
	if u.Window <= 0 {
		return 0
	}
	left := 100 - (u.Used*100+u.Window-1)/u.Window
	return int32(max(0, min(100, left)))
}

// ContextUsageOf reads the usage of the latest model call from the
// transcript an agent's hooks named: Claude Code's session JSON lines, or
// Codex's rollout. The transcript must lie within dir, the member's agent
// directory: its path comes from the pane. ok is false when the transcript
// has no model call yet, or the agent kind keeps no usage fleetd reads.
func ContextUsageOf(kind fleetv1alpha1.AgentKind, dir, transcript string) (ContextUsage, bool, error) {
	var latest func([]byte) (ContextUsage, bool)
	switch kind {
	case fleetv1alpha1.AgentClaude:
		latest = latestClaudeUsage
	case fleetv1alpha1.AgentCodex:
		latest = latestCodexUsage
	default:
		return ContextUsage{}, false, nil
	}
	tail, err := transcriptTailOf(dir, transcript)
	if err != nil || tail == nil {
		return ContextUsage{}, false, err
	}
	u, ok := latest(tail)
	return u, ok, nil
}

// transcriptTailOf reads the end of a transcript within dir, no link
// followed; nil when it does not exist (yet).
func transcriptTailOf(dir, transcript string) ([]byte, error) {
	if !filepath.IsAbs(transcript) || !within(dir, transcript) {
		return nil, fmt.Errorf("transcript %s is not within the agent directory %s", transcript, dir)
	}
	tail, err := memberfs.ReadTailWithin(dir, transcript, transcriptTail)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if tail == nil {
		tail = []byte{}
	}
	return tail, nil
}

// within says whether path lies in dir.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// eachLine calls f with every line of lines; a partial first line (the
// tail cut it) fails to parse wherever it is used and is skipped there.
func eachLine(lines []byte, f func([]byte)) {
	sc := bufio.NewScanner(bytes.NewReader(lines))
	sc.Buffer(make([]byte, 0, 64<<10), transcriptTail)
	for sc.Scan() {
		f(sc.Bytes())
	}
}

// claudeEntry is the part of a transcript line that carries usage.
type claudeEntry struct {
	Type        string `json:"type"`
	IsSidechain bool   `json:"isSidechain"`
	Message     struct {
		Model string `json:"model"`
		Usage *struct {
			InputTokens              int64 `json:"input_tokens"`
			CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
			CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
			OutputTokens             int64 `json:"output_tokens"`
		} `json:"usage"`
	} `json:"message"`
}

// latestClaudeUsage finds the last main-conversation model call in lines
// of a Claude Code transcript: what the model was sent (input, cache
// writes and reads) and wrote.
func latestClaudeUsage(lines []byte) (ContextUsage, bool) {
	var found ContextUsage
	ok := false
	eachLine(lines, func(line []byte) {
		var e claudeEntry
		if json.Unmarshal(line, &e) != nil || e.Type != "assistant" || e.IsSidechain || e.Message.Usage == nil || e.Message.Model == "<synthetic>" {
			return
		}
		us := e.Message.Usage
		window := int64(ClaudeContextWindow)
		if strings.Contains(e.Message.Model, "[1m]") {
			window = 1_000_000
		}
		found = ContextUsage{Used: us.InputTokens + us.CacheCreationInputTokens + us.CacheReadInputTokens + us.OutputTokens, Window: window}
		ok = true
	})
	return found, ok
}

// codexEntry is the part of a Codex rollout line that carries usage: a
// token_count event, with the latest call's usage and the model's window.
type codexEntry struct {
	Type    string `json:"type"`
	Payload struct {
		Type string `json:"type"`
		Info *struct {
			LastTokenUsage struct {
				TotalTokens int64 `json:"total_tokens"`
			} `json:"last_token_usage"`
			ModelContextWindow int64 `json:"model_context_window"`
		} `json:"info"`
	} `json:"payload"`
}

// latestCodexUsage finds the last token count in lines of a Codex rollout.
func latestCodexUsage(lines []byte) (ContextUsage, bool) {
	var found ContextUsage
	ok := false
	eachLine(lines, func(line []byte) {
		var e codexEntry
		if json.Unmarshal(line, &e) != nil || e.Type != "event_msg" || e.Payload.Type != "token_count" || e.Payload.Info == nil || e.Payload.Info.ModelContextWindow <= 0 {
			return
		}
		found = ContextUsage{Used: e.Payload.Info.LastTokenUsage.TotalTokens, Window: e.Payload.Info.ModelContextWindow}
		ok = true
	})
	return found, ok
}
