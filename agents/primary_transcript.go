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

// A primary's token is often shared: the static token of `fleetd dev`
// serves every client a person starts, and outcomes nobody acknowledged
// pile up behind it. The Stop hook prefers the outcomes of the messages
// its own CLI session sent, which the session's transcript records: each
// bridge_send call, and its result with the message's dispatchId.

// maxTranscriptLine bounds one transcript line the hook reads; a longer
// one (a huge tool result) is skipped.
const maxTranscriptLine = 8 << 20

// SessionSends is what a primary's transcript says it sent.
type SessionSends struct {
	// Known says the transcript shows the session calling bridge_send:
	// only then does it tell this session's messages from others'.
	Known bool
	// DispatchIDs are the messages its bridge_send calls returned.
	DispatchIDs map[string]bool
}

// ReadSessionSends reads the transcript a primary's Stop hook names. The
// transcript must be the session's own (its file name carries the session
// id, as Claude Code's <session>.jsonl and Codex's rollout-<time>-<session>.jsonl
// do) and a regular file.
func ReadSessionSends(sessionID, transcript string) (SessionSends, error) {
	if sessionID == "" || transcript == "" {
		return SessionSends{}, errors.New("the hook's input names no session or transcript")
	}
	if !strings.Contains(filepath.Base(transcript), sessionID) {
		return SessionSends{}, fmt.Errorf("transcript %s is not session %s's", transcript, sessionID)
	}
	f, err := os.Open(transcript)
	if err != nil {
		return SessionSends{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return SessionSends{}, err
	}
	if !fi.Mode().IsRegular() {
		return SessionSends{}, fmt.Errorf("transcript %s is not a regular file", transcript)
	}
	return SessionSendsOf(f)
}

// SessionSendsOf reads a transcript's JSON lines for bridge_send calls
// and the dispatchIds their results carry: Claude Code's tool_use and
// tool_result blocks (paired by tool_use_id), and Codex's calls and
// outputs (paired by call_id, or one mcp_tool_call_end event holding
// both).
func SessionSendsOf(r io.Reader) (SessionSends, error) {
	s := SessionSends{DispatchIDs: map[string]bool{}}
	calls := map[string]bool{}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if len(line) > 0 {
			var v any
			if json.Unmarshal(line, &v) == nil {
				s.scan(v, calls)
			}
		}
		if errors.Is(err, io.EOF) {
			return s, nil
		}
		if err != nil {
			return s, err
		}
	}
}

// readLine reads one line, or nil for a line longer than
// maxTranscriptLine, which it skips.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			line = append(line, chunk...)
			if len(line) > maxTranscriptLine {
				tooLong, line = true, nil
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSpace(line), err
	}
}

// scan walks one transcript entry for bridge_send calls (remembering
// their ids in calls) and for results of calls it remembers.
func (s *SessionSends) scan(v any, calls map[string]bool) {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			s.scan(e, calls)
		}
	case map[string]any:
		if isSendCall(v) {
			s.Known = true
			for _, k := range []string{"id", "call_id", "tool_use_id"} {
				if id, ok := v[k].(string); ok && id != "" {
					calls[id] = true
				}
			}
			// An event that holds the call and its result together.
			for _, k := range []string{"result", "output"} {
				if r, ok := v[k]; ok {
					dispatchIDsIn(r, s.DispatchIDs)
				}
			}
			return
		}
		for _, k := range []string{"tool_use_id", "call_id"} {
			if id, ok := v[k].(string); ok && calls[id] {
				dispatchIDsIn(v, s.DispatchIDs)
				return
			}
		}
		for _, e := range v {
			s.scan(e, calls)
		}
	}
}

// isSendCall says whether an entry is a call of fleetd's bridge_send,
// by the tool's name as the CLI records it (mcp__fleetd__bridge_send, or
// bridge_send with the server beside it).
func isSendCall(m map[string]any) bool {
	named := func(v any) bool {
		n, ok := v.(string)
		return ok && (n == "bridge_send" || strings.HasSuffix(n, "__bridge_send"))
	}
	if t, _ := m["type"].(string); t == "tool_result" || t == "function_call_output" {
		return false
	}
	if named(m["name"]) || named(m["tool"]) {
		return true
	}
	inv, ok := m["invocation"].(map[string]any)
	return ok && named(inv["tool"])
}

// dispatchIDsIn adds every dispatchId in a tool result to ids: in its
// objects, and in text that is itself JSON (the result as the CLI kept
// it, a text block of the tool's JSON).
func dispatchIDsIn(v any, ids map[string]bool) {
	switch v := v.(type) {
	case string:
		t := strings.TrimSpace(v)
		if strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
			var inner any
			if json.Unmarshal([]byte(t), &inner) == nil {
				dispatchIDsIn(inner, ids)
			}
		}
	case []any:
		for _, e := range v {
			dispatchIDsIn(e, ids)
		}
	case map[string]any:
		if id, ok := v["dispatchId"].(string); ok && id != "" {
			ids[id] = true
		}
		for _, e := range v {
			dispatchIDsIn(e, ids)
		}
	}
}
