package agents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/memberfs"
)

// HookInput is what an agent's hook reads on stdin: the fields fleetd uses
// of every event's payload. Claude Code and Codex name them alike.
type HookInput struct {
	Event            string `json:"hook_event_name"`
	SessionID        string `json:"session_id"`
	TranscriptPath   string `json:"transcript_path"`
	Cwd              string `json:"cwd"`
	NotificationType string `json:"notification_type"`
	Message          string `json:"message"`
	ToolName         string `json:"tool_name"`
	ToolInput        struct {
		Command     string `json:"command"`
		Description string `json:"description"`
	} `json:"tool_input"`
	Source string `json:"source"`
	Reason string `json:"reason"`
}

// HookAction is what a hook event asks of herdr.
type HookAction int

const (
	// HookIgnore changes nothing.
	HookIgnore HookAction = iota
	// HookReport reports a state.
	HookReport
	// HookRelease gives up the pane's status authority: the session ended.
	HookRelease
)

// HookResult is what one hook event reports.
type HookResult struct {
	Action  HookAction
	State   herdr.AgentState
	Message string
}

// blockingNotifications are Claude Code notifications about something on
// screen that waits for a person; the others (idle, auth done) do not
// block anything.
var blockingNotifications = map[string]bool{
	"permission_prompt": true, "elicitation_dialog": true, "elicitation_url_dialog": true,
	"agent_needs_input": true, "worker_permission_prompt": true,
}

// ClaudeHook decides what a Claude Code hook event reports: the session
// starts idle, a prompt or a tool means working, a permission request or a
// notification of something waiting means blocked (with its message), the
// end of a turn is idle, and the end of the session gives the pane up.
func ClaudeHook(in HookInput) HookResult {
	switch in.Event {
	case "SessionStart", "Stop", "StopFailure":
		return HookResult{Action: HookReport, State: herdr.AgentStateIdle}
	case "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure":
		return HookResult{Action: HookReport, State: herdr.AgentStateWorking}
	case "PermissionRequest":
		msg := "Claude Code asks for permission"
		if in.ToolName != "" {
			msg += " to use " + in.ToolName
		}
		return HookResult{Action: HookReport, State: herdr.AgentStateBlocked, Message: msg}
	case "Notification":
		if blockingNotifications[in.NotificationType] {
			return HookResult{Action: HookReport, State: herdr.AgentStateBlocked, Message: in.Message}
		}
	case "SessionEnd":
		return HookResult{Action: HookRelease}
	}
	return HookResult{Action: HookIgnore}
}

// CodexHook decides what a Codex hook event reports: a prompt or a tool
// means working, an approval prompt means blocked (with what it asks), and
// the end of a turn is idle. The session's start comes with its first
// prompt, so it reports nothing: the prompt's own event follows. Codex
// sends nothing when a turn is interrupted, or when the session ends (its
// process exiting ends herdr's report).
func CodexHook(in HookInput) HookResult {
	switch in.Event {
	case "Stop":
		return HookResult{Action: HookReport, State: herdr.AgentStateIdle}
	case "UserPromptSubmit", "PreToolUse", "PostToolUse":
		return HookResult{Action: HookReport, State: herdr.AgentStateWorking}
	case "PermissionRequest":
		msg := "Codex asks for approval"
		switch {
		case in.ToolInput.Command != "":
			msg += " to run: " + in.ToolInput.Command
		case in.ToolName != "":
			msg += " to use " + in.ToolName
		}
		return HookResult{Action: HookReport, State: herdr.AgentStateBlocked, Message: msg}
	}
	return HookResult{Action: HookIgnore}
}

// Hook decides what a hook event of an agent kind reports; ok is false for
// a kind fleetd does not hook.
func Hook(kind fleetv1alpha1.AgentKind, in HookInput) (HookResult, bool) {
	switch kind {
	case fleetv1alpha1.AgentClaude:
		return ClaudeHook(in), true
	case fleetv1alpha1.AgentCodex:
		return CodexHook(in), true
	}
	return HookResult{}, false
}

// HookStatus is the record `fleetd hook` keeps in the member's agent
// directory: herdr keeps session ids only from its own integrations, so
// fleetd keeps the agent's own.
type HookStatus struct {
	// Agent is the agent kind.
	Agent fleetv1alpha1.AgentKind `json:"agent"`
	// SessionID is the agent's own session id.
	SessionID string `json:"sessionID,omitempty"`
	// TranscriptPath is where the agent keeps the session's transcript.
	TranscriptPath string `json:"transcriptPath,omitempty"`
	// Event is the last hook event, and At when it came.
	Event string    `json:"event"`
	At    time.Time `json:"at"`
	// State is what that event reported (empty when it reported nothing),
	// Message why.
	State   herdr.AgentState `json:"state,omitempty"`
	Message string           `json:"message,omitempty"`
	// Seq orders the records as herdr orders the reports.
	Seq uint64 `json:"seq"`
}

// statusFile is the record's name in the agent directory; maxStatusFile
// bounds what is read of it: a record is a few hundred bytes, and the
// member may leave anything there.
const (
	statusFile    = "hook-status.json"
	maxStatusFile = 64 << 10
)

// ReadHookStatus reads a member's hook record; ok is false when no hook
// has run yet. The record is the member's, read as memberfs reads.
func ReadHookStatus(dir string) (HookStatus, bool, error) {
	raw, err := memberfs.ReadFileWithin(dir, statusFile, maxStatusFile)
	if errors.Is(err, fs.ErrNotExist) {
		return HookStatus{}, false, nil
	}
	if err != nil {
		return HookStatus{}, false, err
	}
	var st HookStatus
	if err := json.Unmarshal(raw, &st); err != nil {
		return HookStatus{}, false, fmt.Errorf("decoding %s: %w", filepath.Join(dir, statusFile), err)
	}
	return st, true, nil
}

// WriteHookStatus records st unless a newer record is already there.
// Hooks run concurrently, so each writes a file of its own and renames it.
func WriteHookStatus(dir string, st HookStatus) error {
	if prev, ok, err := ReadHookStatus(dir); err == nil && ok && prev.Seq >= st.Seq {
		return nil
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, statusFile), raw)
}

// HookEventsFile, in an agent's directory, keeps every hook event, one
// JSON line each, for a person looking into what an agent's hooks said and
// when; eventsFileMax bounds it, keeping the one before as
// HookEventsFile.1.
const (
	HookEventsFile = "hook-events.jsonl"
	eventsFileMax  = 256 << 10
)

// AppendHookEvent adds st to the member's hook event log.
func AppendHookEvent(dir string, st HookStatus) error {
	path := filepath.Join(dir, HookEventsFile)
	if fi, err := os.Stat(path); err == nil && fi.Size() > eventsFileMax {
		_ = os.Rename(path, path+".1")
	}
	line, err := json.Marshal(st)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(append(line, '\n'))
	if err := f.Close(); werr == nil {
		werr = err
	}
	return werr
}

// ReadHookEvents returns the member's hook events, oldest first: those of
// the log's last eventsFileMax bytes and a little more (a log rotates
// after the append that crosses the bound).
func ReadHookEvents(dir string) ([]HookStatus, error) {
	raw, err := memberfs.ReadTailWithin(dir, HookEventsFile, eventsFileMax+64<<10)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ParseHookEvents(raw), nil
}

// ParseHookEvents reads the lines of a HookEventsFile; lines that are not
// an event (one cut off by a crash) are skipped.
func ParseHookEvents(raw []byte) []HookStatus {
	var out []HookStatus
	for _, line := range bytes.Split(raw, []byte("\n")) {
		var st HookStatus
		if len(line) > 0 && json.Unmarshal(line, &st) == nil {
			out = append(out, st)
		}
	}
	return out
}
