package agents

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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

// ClaudeContextUsage reads the usage of the latest model call in a Claude
// Code transcript (its JSON lines, as the hooks name it). The transcript
// must lie within dir, the member's agent directory: its path comes from
// the pane. ok is false when the transcript has no model call yet.
func ClaudeContextUsage(dir, transcript string) (ContextUsage, bool, error) {
	rel, err := filepath.Rel(dir, transcript)
	if err != nil || !filepath.IsAbs(transcript) || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return ContextUsage{}, false, fmt.Errorf("transcript %s is not within the agent directory %s", transcript, dir)
	}
	f, err := os.Open(transcript)
	if errors.Is(err, os.ErrNotExist) {
		return ContextUsage{}, false, nil
	}
	if err != nil {
		return ContextUsage{}, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ContextUsage{}, false, err
	}
	if off := fi.Size() - transcriptTail; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return ContextUsage{}, false, err
		}
	}
	tail, err := io.ReadAll(io.LimitReader(f, transcriptTail))
	if err != nil {
		return ContextUsage{}, false, err
	}
	u, ok := latestClaudeUsage(tail)
	return u, ok, nil
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
// of a transcript. A partial first line (the tail cut it) and lines that
// do not parse are skipped.
func latestClaudeUsage(lines []byte) (ContextUsage, bool) {
	var found ContextUsage
	ok := false
	sc := bufio.NewScanner(bytes.NewReader(lines))
	sc.Buffer(make([]byte, 0, 64<<10), transcriptTail)
	for sc.Scan() {
		var e claudeEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Type != "assistant" || e.IsSidechain || e.Message.Usage == nil || e.Message.Model == "<synthetic>" {
			continue
		}
		us := e.Message.Usage
		window := int64(ClaudeContextWindow)
		if strings.Contains(e.Message.Model, "[1m]") {
			window = 1_000_000
		}
		found = ContextUsage{Used: us.InputTokens + us.CacheCreationInputTokens + us.CacheReadInputTokens + us.OutputTokens, Window: window}
		ok = true
	}
	return found, ok
}
