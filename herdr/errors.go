package herdr

import (
	"errors"
	"strings"
)

// Error codes herdr puts in an error response. The list covers the methods
// fleetd calls; herdr may send others, which still arrive as an *Error.
const (
	// CodeInvalidRequest is sent, with an empty id, for a line that is not
	// JSON, names an unknown method, or has params of the wrong shape or enum.
	CodeInvalidRequest = "invalid_request"
	// CodeInvalidParams is sent for params that parse but make no sense.
	CodeInvalidParams = "invalid_params"
	// CodeInternalError is sent when the server failed on its own account.
	CodeInternalError = "internal_error"
	// CodeServerUnavailable is sent when the server could not dispatch a request.
	CodeServerUnavailable = "server_unavailable"
	// CodeTimeout is sent when a held-open wait ran out of time.
	CodeTimeout = "timeout"

	// CodeWorkspaceNotFound is sent for an unknown workspace id.
	CodeWorkspaceNotFound = "workspace_not_found"
	// CodeTabNotFound is sent for an unknown tab id.
	CodeTabNotFound = "tab_not_found"
	// CodePaneNotFound is sent for an unknown pane id.
	CodePaneNotFound = "pane_not_found"
	// CodeNoActiveWorkspace is sent when a call needs a workspace and none exists.
	CodeNoActiveWorkspace = "no_active_workspace"
	// CodeWorkspaceCreateFailed is sent when a workspace's shell could not start.
	CodeWorkspaceCreateFailed = "workspace_create_failed"
	// CodeTabCreateFailed is sent when a tab's shell could not start.
	CodeTabCreateFailed = "tab_create_failed"
	// CodeInvalidEnv is sent for an env map with an empty key, '=' or NUL.
	CodeInvalidEnv = "invalid_env"
	// CodeInvalidKey is sent for a key name herdr cannot encode.
	CodeInvalidKey = "invalid_key"
	// CodePaneSendFailed is sent when input could not be written to a pane.
	CodePaneSendFailed = "pane_send_failed"
	// CodeInvalidRegex is sent for an output match regex that does not compile.
	CodeInvalidRegex = "invalid_regex"

	// CodeAgentNotFound is sent when a target names no agent.
	CodeAgentNotFound = "agent_not_found"
	// CodeAgentTargetAmbiguous is sent when a target names several agents.
	CodeAgentTargetAmbiguous = "agent_target_ambiguous"
	// CodeAgentNotReady is sent when an agent cannot take input yet.
	CodeAgentNotReady = "agent_not_ready"
	// CodeAgentNotRunning is sent when a waited-for agent went away.
	CodeAgentNotRunning = "agent_not_running"
	// CodeAgentBlocked is sent when a prompt would land in an approval or
	// question dialog instead of the agent's input.
	CodeAgentBlocked = "agent_blocked"
	// CodeAgentPromptStalled is sent when agent.prompt with wait saw no
	// state change within 5 s of typing into an agent that was not working.
	CodeAgentPromptStalled = "agent_prompt_stalled"
	// CodeAgentPromptFailed is sent when a prompt could not be typed.
	CodeAgentPromptFailed = "agent_prompt_failed"
	// CodeEmptyAgentPrompt is sent for a prompt with no text.
	CodeEmptyAgentPrompt = "empty_agent_prompt"
	// CodeInvalidAgent is sent for a reported agent label that is empty.
	CodeInvalidAgent = "invalid_agent"
	// CodeInvalidAgentName is sent for a name outside [a-z][a-z0-9_-]{0,31}.
	CodeInvalidAgentName = "invalid_agent_name"
	// CodeAgentNameTaken is sent when another agent already has the name.
	CodeAgentNameTaken = "agent_name_taken"
	// CodePermissionDenied is fleetd's pane server refusing a caller its
	// peer credentials do not allow: a member's user acting on another
	// member's pane. herdr itself has one user and no such refusal.
	CodePermissionDenied = "permission_denied"
	// CodeUnsupportedAgentKind is sent for an agent kind herdr does not know.
	CodeUnsupportedAgentKind = "unsupported_agent_kind"
	// CodeInvalidAgentArgument is sent for arguments with control characters.
	CodeInvalidAgentArgument = "invalid_agent_argument"
	// CodeInvalidAgentTimeout is sent for a start timeout outside (3000, 300000] ms.
	CodeInvalidAgentTimeout = "invalid_agent_timeout"
	// CodeAgentPaneNotFound is sent when agent.start names an unknown pane.
	CodeAgentPaneNotFound = "agent_pane_not_found"
	// CodeAgentPaneBusy is sent when agent.start targets a pane that is not an
	// idle shell: it runs a foreground program or already hosts an agent.
	CodeAgentPaneBusy = "agent_pane_busy"
	// CodeAgentPaneUnavailable is sent when the target pane has no live terminal.
	CodeAgentPaneUnavailable = "agent_pane_unavailable"
	// CodeAgentStartInputFailed is sent when the launch command could not be typed.
	CodeAgentStartInputFailed = "agent_start_input_failed"
	// CodeAgentLaunchPending is sent when an agent is still starting.
	CodeAgentLaunchPending = "agent_launch_pending"
)

// Error is an error response from herdr. Compare it with errors.Is against the
// Err* values, which match by code.
type Error struct {
	// Code is herdr's machine-readable error code, e.g. "pane_not_found".
	Code string `json:"code"`
	// Message is herdr's human-readable explanation.
	Message string `json:"message"`
}

// Error implements error.
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is reports whether target is an *Error with the same code, or ErrNotFound
// and e's code is one of herdr's *_not_found codes.
func (e *Error) Is(target error) bool {
	if target == ErrNotFound {
		return strings.HasSuffix(e.Code, "_not_found")
	}
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels to match with errors.Is. Only the code is compared.
var (
	// ErrInvalidRequest matches CodeInvalidRequest.
	ErrInvalidRequest = &Error{Code: CodeInvalidRequest}
	// ErrTimeout matches CodeTimeout.
	ErrTimeout = &Error{Code: CodeTimeout}
	// ErrWorkspaceNotFound matches CodeWorkspaceNotFound.
	ErrWorkspaceNotFound = &Error{Code: CodeWorkspaceNotFound}
	// ErrTabNotFound matches CodeTabNotFound.
	ErrTabNotFound = &Error{Code: CodeTabNotFound}
	// ErrPaneNotFound matches CodePaneNotFound.
	ErrPaneNotFound = &Error{Code: CodePaneNotFound}
	// ErrInvalidEnv matches CodeInvalidEnv.
	ErrInvalidEnv = &Error{Code: CodeInvalidEnv}
	// ErrInvalidKey matches CodeInvalidKey.
	ErrInvalidKey = &Error{Code: CodeInvalidKey}
	// ErrAgentNotFound matches CodeAgentNotFound.
	ErrAgentNotFound = &Error{Code: CodeAgentNotFound}
	// ErrAgentNotReady matches CodeAgentNotReady.
	ErrAgentNotReady = &Error{Code: CodeAgentNotReady}
	// ErrAgentNotRunning matches CodeAgentNotRunning.
	ErrAgentNotRunning = &Error{Code: CodeAgentNotRunning}
	// ErrAgentPromptStalled matches CodeAgentPromptStalled.
	ErrAgentPromptStalled = &Error{Code: CodeAgentPromptStalled}
	// ErrAgentBlocked matches CodeAgentBlocked.
	ErrAgentBlocked = &Error{Code: CodeAgentBlocked}
	// ErrEmptyAgentPrompt matches CodeEmptyAgentPrompt.
	ErrEmptyAgentPrompt = &Error{Code: CodeEmptyAgentPrompt}
	// ErrInvalidAgent matches CodeInvalidAgent.
	ErrInvalidAgent = &Error{Code: CodeInvalidAgent}
	// ErrInvalidAgentName matches CodeInvalidAgentName.
	ErrInvalidAgentName = &Error{Code: CodeInvalidAgentName}
	// ErrAgentNameTaken matches CodeAgentNameTaken.
	ErrAgentNameTaken = &Error{Code: CodeAgentNameTaken}
	// ErrUnsupportedAgentKind matches CodeUnsupportedAgentKind.
	ErrUnsupportedAgentKind = &Error{Code: CodeUnsupportedAgentKind}
	// ErrInvalidAgentArgument matches CodeInvalidAgentArgument.
	ErrInvalidAgentArgument = &Error{Code: CodeInvalidAgentArgument}
	// ErrInvalidAgentTimeout matches CodeInvalidAgentTimeout.
	ErrInvalidAgentTimeout = &Error{Code: CodeInvalidAgentTimeout}
	// ErrAgentPaneNotFound matches CodeAgentPaneNotFound.
	ErrAgentPaneNotFound = &Error{Code: CodeAgentPaneNotFound}
	// ErrAgentPaneBusy matches CodeAgentPaneBusy.
	ErrAgentPaneBusy = &Error{Code: CodeAgentPaneBusy}
	// ErrAgentLaunchPending matches CodeAgentLaunchPending.
	ErrAgentLaunchPending = &Error{Code: CodeAgentLaunchPending}
)

// ErrNotFound matches every *Error whose code ends in "_not_found": the pane,
// tab, workspace or agent a call named is gone.
var ErrNotFound = errors.New("not found")

// ErrUnavailable wraps failures to reach herdr at all: no socket, connection
// refused, or a connection that broke before a response arrived.
var ErrUnavailable = errors.New("unavailable")

// ErrUntrustedServer says the socket's server runs as a user fleetd does
// not trust: neither root nor fleetd's own.
var ErrUntrustedServer = errors.New("untrusted herdr server")

// ErrProtocol wraps responses that break the wire protocol: a line that is
// not JSON, a mismatched id, or a result of the wrong type.
var ErrProtocol = errors.New("protocol violation")

// ErrUnsupportedProtocol is returned by Ping when the server speaks a protocol
// older than MinProtocol.
var ErrUnsupportedProtocol = errors.New("unsupported protocol")
