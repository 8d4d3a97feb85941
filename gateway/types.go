package gateway

import "github.com/fleetd/fleetd/gateway/toolerr"

// Every tool's input and output, and the bodies of the REST surface. Their
// jsonschema tags are the descriptions a client sees in tools/list.

// SendInput is the input of bridge_send.
type SendInput struct {
	Content        string `json:"content,omitempty" jsonschema:"the message for the worker, or your answer when turnId is set; leave it out with dispatchId"`
	SessionID      string `json:"sessionId,omitempty" jsonschema:"the member to send to: its name, agent session id, terminal id or pane id; omit when there is one other member (or none: one is spawned)"`
	TimeoutMs      *int64 `json:"timeoutMs,omitempty" jsonschema:"how long to wait in milliseconds; default 600000, capped by the gateway"`
	Wait           *bool  `json:"wait,omitempty" jsonschema:"false returns at once with dispatchId; default true"`
	TurnID         string `json:"turnId,omitempty" jsonschema:"answer the question with this turnId instead of sending a new message"`
	IdempotencyKey string `json:"idempotencyKey,omitempty" jsonschema:"makes retries safe: the same key never sends twice and re-attaches to the first message"`
	DispatchID     string `json:"dispatchId,omitempty" jsonschema:"re-attach to a message you sent (after a timeout or an interrupted call): wait for its outcome again, without sending anything"`
	AutoSpawn      *bool  `json:"autoSpawn,omitempty" jsonschema:"false never spawns a member for this message; default true: a message to a profile with no live member (or with no sessionId to a namespace without members) starts one"`
}

// SendOutput is the outcome of bridge_send.
type SendOutput struct {
	failure
	Outcome    string `json:"outcome,omitempty" jsonschema:"reply, question, turn_done, timeout, cancelled, interrupted (the gateway stopped; call again with dispatchId) or dispatched"`
	Text       string `json:"text,omitempty" jsonschema:"the reply, the question, or the terminal tail for turn_done"`
	TurnID     string `json:"turnId,omitempty" jsonschema:"for a question: pass it back with your answer"`
	DispatchID string `json:"dispatchId,omitempty" jsonschema:"the message's id, for bridge_poll and bridge_ack"`
	Member     string `json:"member,omitempty" jsonschema:"the member the message went to"`
}

func (o *SendOutput) metricOutcome() string { return o.Outcome }

// ReplyInput is the input of bridge_reply.
type ReplyInput struct {
	Content string `json:"content" jsonschema:"your complete reply to the sender"`
}

// ReplyOutput is the result of bridge_reply.
type ReplyOutput struct {
	failure
	DispatchID string `json:"dispatchId,omitempty" jsonschema:"the message you replied to"`
	Late       bool   `json:"late,omitempty" jsonschema:"the sender's deadline had passed; the reply reaches it later"`
}

// AskInput is the input of bridge_ask.
type AskInput struct {
	Content   string `json:"content" jsonschema:"your question for the sender"`
	TimeoutMs *int64 `json:"timeoutMs,omitempty" jsonschema:"how long to wait for the answer in milliseconds; default 600000"`
}

// AskOutput is the result of bridge_ask.
type AskOutput struct {
	failure
	Answer  *string `json:"answer,omitempty" jsonschema:"the sender's answer"`
	Outcome string  `json:"outcome,omitempty" jsonschema:"timeout when no answer came in time; interrupted when the gateway stopped"`
	TurnID  string  `json:"turnId,omitempty" jsonschema:"the question this answers"`
	Text    string  `json:"text,omitempty" jsonschema:"what to do next, for interrupted"`
}

func (o *AskOutput) metricOutcome() string {
	if o.Answer != nil {
		return "answer"
	}
	return o.Outcome
}

// PollInput is the input of bridge_poll.
type PollInput struct{}

// PollOutput is the result of bridge_poll.
type PollOutput struct {
	failure
	Outcomes  []PolledOutcome `json:"outcomes" jsonschema:"settled messages nobody waited for, oldest first"`
	Questions []OpenQuestion  `json:"questions" jsonschema:"open questions workers asked you"`
}

// AckInput is the input of bridge_ack.
type AckInput struct {
	DispatchID string   `json:"dispatchId,omitempty" jsonschema:"one message to acknowledge"`
	IDs        []string `json:"ids,omitempty" jsonschema:"several messages to acknowledge"`
}

// AckOutput is the result of bridge_ack.
type AckOutput struct {
	failure
	Acknowledged []string `json:"acknowledged" jsonschema:"the ids acknowledged by this call"`
}

// StatusInput is the input of bridge_status.
type StatusInput struct {
	SessionID string `json:"sessionId,omitempty" jsonschema:"one member: name, agent session id, terminal id or pane id"`
}

// StatusOutput is the result of bridge_status.
type StatusOutput struct {
	failure
	Members   []MemberView     `json:"members" jsonschema:"the member asked for (or you, if you are a member), in full"`
	Pending   []DelegationView `json:"pending" jsonschema:"your messages still in progress"`
	Outcomes  []PolledOutcome  `json:"outcomes" jsonschema:"outcomes of your messages that nobody waited for and you have not acknowledged: what bridge_poll shows"`
	Questions []OpenQuestion   `json:"questions" jsonschema:"questions workers asked you that are still open"`
}

// SpawnInput is the input of bridge_spawn.
type SpawnInput struct {
	Profile string `json:"profile,omitempty" jsonschema:"the profile to start from; default: the namespace's default profile"`
}

// SpawnOutput is the result of bridge_spawn.
type SpawnOutput struct {
	failure
	Member *MemberView `json:"member,omitempty" jsonschema:"the new member"`
}

// ListInput is the input of bridge_list.
type ListInput struct {
	Status     string `json:"status,omitempty" jsonschema:"only members with this status: idle, working, blocked, done, unknown (a ready member's agent), or pending, starting, restarting, failed, terminating"`
	Team       string `json:"team,omitempty" jsonschema:"only members of this team"`
	Profile    string `json:"profile,omitempty" jsonschema:"only members of this profile"`
	NamePrefix string `json:"namePrefix,omitempty" jsonschema:"only members whose name starts with this"`
	Limit      *int   `json:"limit,omitempty" jsonschema:"at most this many members, 1 to 500; default 100"`
	Continue   string `json:"continue,omitempty" jsonschema:"the continue value of the previous page, for the next one"`
}

// ListOutput is the result of bridge_list. A page holds the first members
// by name after continue; it shows them by team and profile, which most
// members share with others, so each is said once.
type ListOutput struct {
	failure
	Groups   []MemberGroup `json:"groups" jsonschema:"the members on this page, by team and profile"`
	Total    int           `json:"total" jsonschema:"how many members match the filters, on every page"`
	Continue string        `json:"continue,omitempty" jsonschema:"more members match: pass this as continue for the next page"`
}

// MemberGroup is the members on a bridge_list page of one team and one
// profile.
type MemberGroup struct {
	Team    string          `json:"team,omitempty" jsonschema:"their team; none when left out"`
	Profile string          `json:"profile,omitempty" jsonschema:"their profile; none (an inline member) when left out"`
	Members []MemberSummary `json:"members" jsonschema:"the members, by name"`
}

// StopInput is the input of bridge_stop.
type StopInput struct {
	PaneID string `json:"paneId" jsonschema:"the member to stop: pane id, name, terminal id or agent session id"`
}

// StopOutput is the result of bridge_stop.
type StopOutput struct {
	failure
	Stopped     string `json:"stopped,omitempty" jsonschema:"the stopped member's name"`
	AlreadyGone bool   `json:"alreadyGone,omitempty" jsonschema:"there was no such member (any more), or it was already stopping: nothing left to stop"`
}

// ProfilesInput is the input of bridge_profiles.
type ProfilesInput struct{}

// ProfilesOutput is the result of bridge_profiles.
type ProfilesOutput struct {
	failure
	Profiles []ProfileView `json:"profiles" jsonschema:"profiles in your namespace"`
}

// WhoamiInput is the input of bridge_whoami.
type WhoamiInput struct{}

// WhoamiOutput is the result of bridge_whoami.
type WhoamiOutput struct {
	failure
	Kind       string          `json:"kind,omitempty" jsonschema:"Member, ServiceAccount or Static"`
	Name       string          `json:"name,omitempty" jsonschema:"your principal name"`
	Namespace  string          `json:"namespace,omitempty" jsonschema:"the Kubernetes namespace you act in"`
	Primary    bool            `json:"primary,omitempty" jsonschema:"true for callers that are not fleet members"`
	Team       string          `json:"team,omitempty" jsonschema:"your team, for members"`
	Role       string          `json:"role,omitempty" jsonschema:"your role in the team: lead or member"`
	Member     *MemberView     `json:"member,omitempty" jsonschema:"you, as a member"`
	Namespaces map[string]bool `json:"namespaces,omitempty" jsonschema:"tool namespaces and whether they are on"`
}

// CancelInput is the input of bridge_cancel.
type CancelInput struct {
	DispatchID string `json:"dispatchId" jsonschema:"the message to withdraw: the dispatchId bridge_send returned"`
}

// CancelOutput is the result of bridge_cancel.
type CancelOutput struct {
	failure
	DispatchID string `json:"dispatchId,omitempty" jsonschema:"the message"`
	Outcome    string `json:"outcome,omitempty" jsonschema:"cancelled; or how it settled first (reply, turn_done, timeout, worker_gone, delivery_failed); cancelling while the member's turn is still being interrupted"`
	Text       string `json:"text,omitempty" jsonschema:"the reply or the terminal tail when it settled another way first; why, for an error outcome"`
}

func (o *CancelOutput) metricOutcome() string { return o.Outcome }

// ReadInput is the input of bridge_read.
type ReadInput struct {
	SessionID string `json:"sessionId" jsonschema:"the member to read: its name, agent session id, terminal id or pane id"`
	Source    string `json:"source,omitempty" jsonschema:"visible (the screen now), recent (the latest lines as displayed; the default), recent_unwrapped (the latest output as logical lines) or detection (what the screen rules look at, with the rule that matched and the state it concluded)"`
	Lines     *int   `json:"lines,omitempty" jsonschema:"how many lines of recent output, 1 to 1000; default 80"`
}

// ReadOutput is the result of bridge_read.
type ReadOutput struct {
	failure
	Member    string `json:"member,omitempty" jsonschema:"the member read"`
	PaneID    string `json:"paneId,omitempty" jsonschema:"its pane"`
	Source    string `json:"source,omitempty" jsonschema:"what was read"`
	Text      string `json:"text,omitempty" jsonschema:"the terminal text, escape sequences removed"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"the text was longer than 64 KiB: its end is kept"`
	// Detection explains the member's screen status, for source detection.
	Detection *DetectionView `json:"detection,omitempty" jsonschema:"for source detection: what the screen rules concluded from text and title, and why"`
}

// DetectionView is what a member's screen rules make of its screen now.
type DetectionView struct {
	AgentStatus string `json:"agentStatus" jsonschema:"the agent's status as herdr holds it now (from the agent's hooks, or the screen): idle, working, blocked, done or unknown"`
	Manifest    string `json:"manifest,omitempty" jsonschema:"the screen manifest's agent label and version; empty when the member's agent has none (a plain command)"`
	Title       string `json:"title,omitempty" jsonschema:"the terminal title the rules look at (region osc_title)"`
	State       string `json:"state,omitempty" jsonschema:"the state the rules concluded: idle, working, blocked or unknown"`
	Rule        string `json:"rule,omitempty" jsonschema:"the rule that decided; empty when none matched and the agent is taken to be idle"`
	Visible     bool   `json:"visible,omitempty" jsonschema:"the state is seen on screen (a dialog, a spinner, a prompt box), not assumed"`
	Skip        bool   `json:"skip,omitempty" jsonschema:"the rule keeps the previous state while it matches (a menu, a transcript viewer)"`
	Region      string `json:"region,omitempty" jsonschema:"the deciding rule's region of the screen: the dialog, for blocked"`
	// Matches lists every rule whose conditions hold.
	Matches []DetectionMatch `json:"matches" jsonschema:"every rule that matched, in manifest order; the highest priority decides, the earlier on a tie"`
}

// DetectionMatch is one screen rule that matched.
type DetectionMatch struct {
	Rule     string `json:"rule" jsonschema:"the rule's id"`
	State    string `json:"state" jsonschema:"the state it decides"`
	Priority int    `json:"priority" jsonschema:"its priority"`
	Region   string `json:"region" jsonschema:"the region of the screen it looks at"`
}

// TeamStatusInput is the input of team_status.
type TeamStatusInput struct {
	Team string `json:"team,omitempty" jsonschema:"the team; members may omit it (their own team), primaries must pass it"`
}

// TeamStatusOutput is the result of team_status.
type TeamStatusOutput struct {
	failure
	Team    string       `json:"team,omitempty" jsonschema:"the team"`
	Members []MemberView `json:"members" jsonschema:"members with their live status"`
}

// TeamMessageInput is the input of team_message.
type TeamMessageInput struct {
	Recipient string `json:"recipient" jsonschema:"a team member's name (or id), or \"broadcast\" for every other member"`
	Content   string `json:"content" jsonschema:"the message"`
	Team      string `json:"team,omitempty" jsonschema:"for primaries: the team"`
	// IncludeSelf makes a broadcast reach its sender too.
	IncludeSelf bool `json:"includeSelf,omitempty" jsonschema:"for broadcast: send to yourself as well; by default a broadcast goes to every member but you"`
	// ImagePaths and Images are pictures sent with the message.
	ImagePaths []string     `json:"imagePaths,omitempty" jsonschema:"for members: image files to send with the message, relative to your working directory or absolute within it (PNG, JPEG, GIF or WebP)"`
	Images     []ImageInput `json:"images,omitempty" jsonschema:"images to send with the message, their bytes in the call; how a primary sends images"`
}

// ImageInput is an image whose bytes come in the call.
type ImageInput struct {
	Data string `json:"data" jsonschema:"the image's bytes in base64 (a data: URL is taken too): PNG, JPEG, GIF or WebP"`
	Name string `json:"name,omitempty" jsonschema:"what to call the image, for people"`
}

// TeamMessageOutput is the result of team_message.
type TeamMessageOutput struct {
	failure
	DispatchIDs []string `json:"dispatchIds" jsonschema:"the ids of the messages sent, one per recipient"`
	Recipients  []string `json:"recipients" jsonschema:"the members the messages went to"`
}

// TeamManageInput is the input of team_manage.
type TeamManageInput struct {
	Action  string `json:"action" jsonschema:"add or remove"`
	Profile string `json:"profile,omitempty" jsonschema:"for add: the profile; default: the namespace's default profile"`
	Name    string `json:"name,omitempty" jsonschema:"for add: the new member's name (optional); for remove: a member to remove"`
	// RemoveAgentIDs names several members to remove at once.
	RemoveAgentIDs []string `json:"removeAgentIds,omitempty" jsonschema:"for remove: the members to remove (name, agent session id, terminal id or pane id); all or none are removed"`
	Team           string   `json:"team,omitempty" jsonschema:"for primaries: the team"`
	// Message onboards the new member, with its images.
	Message    string       `json:"message,omitempty" jsonschema:"for add: a first message for the new member, typed in once its agent is ready (like team_message, it does not wait)"`
	ImagePaths []string     `json:"imagePaths,omitempty" jsonschema:"for add, with message: image files to send with it, as team_message takes them"`
	Images     []ImageInput `json:"images,omitempty" jsonschema:"for add, with message: images to send with it, their bytes in the call"`
}

// TeamManageOutput is the result of team_manage.
type TeamManageOutput struct {
	failure
	Action string      `json:"action,omitempty" jsonschema:"add or remove"`
	Member *MemberView `json:"member,omitempty" jsonschema:"the member added, or the first one removed"`
	// DispatchID is the id of the onboarding message.
	DispatchID string `json:"dispatchId,omitempty" jsonschema:"for add with message: the message's id, for bridge_poll and bridge_ack"`
	// Removed names every member removed.
	Removed []string `json:"removed" jsonschema:"for remove: the names of the members removed"`
}

// ProcessRunInput is the input of process_run.
type ProcessRunInput struct {
	Command    []string `json:"command" jsonschema:"the program and its arguments, run without a shell"`
	WorkingDir string   `json:"workingDir,omitempty" jsonschema:"absolute directory to run in; default: the gateway's"`
}

// ProcessIDInput names one process.
type ProcessIDInput struct {
	ProcessID string `json:"processId" jsonschema:"the id process_run returned"`
}

// ProcessStatusInput is the input of process_status.
type ProcessStatusInput struct {
	ProcessID string `json:"processId,omitempty" jsonschema:"one process; default: all of yours"`
}

// ProcessLogsInput is the input of process_logs.
type ProcessLogsInput struct {
	ProcessID string `json:"processId" jsonschema:"the id process_run returned"`
	TailBytes *int   `json:"tailBytes,omitempty" jsonschema:"how many of the last bytes to return; default: all kept"`
}

// ProcessView is a process as the process tools show it.
type ProcessView struct {
	ProcessID  string   `json:"processId" jsonschema:"the process id"`
	Command    []string `json:"command" jsonschema:"the program and its arguments"`
	WorkingDir string   `json:"workingDir,omitempty" jsonschema:"the directory it runs in"`
	State      string   `json:"state" jsonschema:"running or exited"`
	PID        int      `json:"pid,omitempty" jsonschema:"the operating-system process id"`
	ExitCode   *int     `json:"exitCode,omitempty" jsonschema:"for exited processes; -1 when killed by a signal"`
	StartedAt  string   `json:"startedAt" jsonschema:"when it started (RFC 3339)"`
	EndedAt    string   `json:"endedAt,omitempty" jsonschema:"when it ended (RFC 3339)"`
}

// ProcessOutput is the result of process_run and process_kill.
type ProcessOutput struct {
	failure
	Process *ProcessView `json:"process,omitempty" jsonschema:"the process"`
}

// ProcessStatusOutput is the result of process_status.
type ProcessStatusOutput struct {
	failure
	Processes []ProcessView `json:"processes" jsonschema:"your processes, oldest first"`
}

// ProcessLogsOutput is the result of process_logs.
type ProcessLogsOutput struct {
	failure
	ProcessID string `json:"processId,omitempty" jsonschema:"the process id"`
	State     string `json:"state,omitempty" jsonschema:"running or exited"`
	Output    string `json:"output" jsonschema:"the kept output, stdout and stderr interleaved"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"older output was dropped"`
}

// MemberView is a member as tools and the REST surface show it.
type MemberView struct {
	Name             string `json:"name" jsonschema:"member name; use it as sessionId"`
	Phase            string `json:"phase,omitempty" jsonschema:"Pending, Starting, Ready, Restarting, Failed or Terminating"`
	AgentStatus      string `json:"agentStatus,omitempty" jsonschema:"idle, working, blocked (a dialog is on screen), done or unknown"`
	AgentStatusSince string `json:"agentStatusSince,omitempty" jsonschema:"when agentStatus last changed (RFC 3339)"`
	Waiting          string `json:"waiting,omitempty" jsonschema:"for a blocked member: the dialog on its screen, or what its agent said it waits for; someone must answer it in the pane"`
	PaneID           string `json:"paneId,omitempty" jsonschema:"herdr's id of the member's pane"`
	TerminalID       string `json:"terminalId,omitempty" jsonschema:"herdr's id of the pane's terminal"`
	WorkspaceID      string `json:"workspaceId,omitempty" jsonschema:"herdr's id of the member's workspace"`
	SessionID        string `json:"sessionId,omitempty" jsonschema:"the agent's own session id"`
	Team             string `json:"team,omitempty" jsonschema:"the team"`
	Role             string `json:"role,omitempty" jsonschema:"lead or member"`
	Profile          string `json:"profile,omitempty" jsonschema:"the profile the member runs from"`
	QueueDepth       int32  `json:"queueDepth,omitempty" jsonschema:"messages waiting for this member"`
	InFlight         string `json:"inFlight,omitempty" jsonschema:"dispatchId of the message it is working on"`
	SpawnedBy        string `json:"spawnedBy,omitempty" jsonschema:"who spawned it through the gateway (kind:name)"`
	Self             bool   `json:"self,omitempty" jsonschema:"true for the calling member"`
	Terminating      bool   `json:"terminating,omitempty" jsonschema:"the member is being deleted"`
	// ContextRemainingPercent is null where the agent reports no usage.
	ContextRemainingPercent *int32 `json:"contextRemainingPercent" jsonschema:"how much of its context window the agent's session had left at its latest model call, 0 to 100; null where the agent reports no usage"`
}

// MemberSummary is a member as bridge_list shows it: what a primary needs
// to pick a worker, and nothing more. Its team and profile are its
// group's.
type MemberSummary struct {
	Name       string `json:"name" jsonschema:"member name; use it as sessionId"`
	Status     string `json:"status" jsonschema:"a ready member's agent status (idle, working, blocked, done, unknown), else its phase in lower case"`
	Waiting    string `json:"waiting,omitempty" jsonschema:"for a blocked member: the dialog on its screen; someone must answer it in the pane"`
	QueueDepth int32  `json:"queueDepth,omitempty" jsonschema:"messages waiting for it"`
	Self       bool   `json:"self,omitempty" jsonschema:"true for the calling member"`
}

// ProfileView is a Profile as bridge_profiles shows it. It never carries the
// environment: values may be credentials.
type ProfileView struct {
	Name        string   `json:"name" jsonschema:"the name"`
	Description string   `json:"description,omitempty" jsonschema:"what the profile is for"`
	Agent       string   `json:"agent,omitempty" jsonschema:"the herdr agent kind (claude, codex, ...)"`
	Command     []string `json:"command,omitempty" jsonschema:"the program and its arguments"`
	Model       string   `json:"model,omitempty" jsonschema:"the model the agent runs"`
	Effort      string   `json:"effort,omitempty" jsonschema:"the reasoning effort"`
	Billing     string   `json:"billing" jsonschema:"subscription or api"`
	Default     bool     `json:"default,omitempty" jsonschema:"bridge_send spawns from this profile when there is no member"`
}

// DelegationView is one of the caller's messages still in progress.
type DelegationView struct {
	DispatchID string `json:"dispatchId" jsonschema:"the message id"`
	Member     string `json:"member" jsonschema:"the member the message went to"`
	Phase      string `json:"phase" jsonschema:"Pending, Queued, Delivered, Working or Asking"`
	Created    string `json:"created,omitempty" jsonschema:"when it was sent (RFC 3339)"`
	Deadline   string `json:"deadline,omitempty" jsonschema:"when it times out (RFC 3339)"`
	// Question is the open question, if the worker asked one.
	Question *OpenQuestion `json:"question,omitempty"`
}

// OpenQuestion is a worker's unanswered bridge_ask.
type OpenQuestion struct {
	DispatchID string `json:"dispatchId" jsonschema:"the message id"`
	TurnID     string `json:"turnId" jsonschema:"pass it to bridge_send with your answer"`
	Member     string `json:"member" jsonschema:"the member the message went to"`
	Text       string `json:"text" jsonschema:"the question"`
	AskedAt    string `json:"askedAt,omitempty" jsonschema:"when the worker asked (RFC 3339)"`
}

// PolledOutcome is a settled message's outcome as bridge_poll shows it.
type PolledOutcome struct {
	DispatchID string         `json:"dispatchId" jsonschema:"the message id"`
	Member     string         `json:"member" jsonschema:"the member the message went to"`
	Outcome    string         `json:"outcome" jsonschema:"reply, turn_done, timeout, or an error code such as worker_gone"`
	Text       string         `json:"text,omitempty" jsonschema:"the reply or terminal tail"`
	Error      *toolerr.Error `json:"error,omitempty" jsonschema:"why it failed, for error outcomes"`
	Content    string         `json:"content,omitempty" jsonschema:"the start of the message you sent"`
	SettledAt  string         `json:"settledAt,omitempty" jsonschema:"when it settled (RFC 3339)"`
}

// SpawnRequest is the body of POST /members.
type SpawnRequest struct {
	// Profile names the Profile; empty means the default one.
	Profile string `json:"profile,omitempty" jsonschema:"the profile the member runs from"`
	// Name is the new member's name; empty means a generated one.
	Name string `json:"name,omitempty" jsonschema:"the new member's name; default: one made from the profile's"`
}

// StopResponse is the body of DELETE /members/{paneId}.
type StopResponse struct {
	Stopped     string `json:"stopped"`
	AlreadyGone bool   `json:"alreadyGone,omitempty"`
}

// Capabilities is the body of GET /v1/mcp/capabilities: what this gateway
// offers its caller.
type Capabilities struct {
	// SupportedNamespaces lists the tool namespaces that are on.
	SupportedNamespaces []ToolNamespace `json:"supportedNamespaces"`
	// Tools lists the tools that can be called: those of the namespaces
	// that are on.
	Tools []string `json:"tools"`
	// ProcessEnabled and TeamEnabled say whether the process and team
	// namespaces are on.
	ProcessEnabled bool `json:"processEnabled"`
	TeamEnabled    bool `json:"teamEnabled"`
	// TeamManagePermissions says what team members that are not leads may
	// do with team_manage (leads and primaries may do both).
	TeamManagePermissions TeamManagePermissions `json:"teamManagePermissions"`
	// TeamModelPresets are the Profiles of the caller's namespace that
	// team_manage add can start a member from.
	TeamModelPresets []ProfileView `json:"teamModelPresets"`
	// Namespaces lists every namespace, on or off; one that is off lists no
	// tools, and calls to its tools answer feature_disabled.
	Namespaces []NamespaceCapability `json:"namespaces"`
}

// ProvidersDiagnostics is the body of GET /v1/diagnostics/providers: for
// each agent the caller's namespace runs or can run, whether its CLI is
// there, the Profiles that use it and the members that run it.
type ProvidersDiagnostics struct {
	Namespace string         `json:"namespace"`
	Providers []ProviderView `json:"providers"`
}

// ProviderView is one agent kind (claude, codex, ...) or "command", the
// members that run a plain command.
type ProviderView struct {
	Agent string `json:"agent"`
	// CLI is the agent's command where the shared pane server's panes run;
	// absent for plain commands, whose programs are each Profile's.
	CLI      *CLIView          `json:"cli,omitempty"`
	Profiles []ProviderProfile `json:"profiles"`
	Members  []ProviderMember  `json:"members"`
}

// CLIView is what a look for a command on PATH found.
type CLIView struct {
	Command string `json:"command"`
	Found   bool   `json:"found"`
	Path    string `json:"path,omitempty"`
	// Version is the first line of `<cli> --version`.
	Version string `json:"version,omitempty"`
	// Error says why it is not found, or why its version is unknown.
	Error string `json:"error,omitempty"`
}

// ProviderProfile is a Profile as diagnostics show it: never its
// environment, only how it bills.
type ProviderProfile struct {
	Name    string `json:"name"`
	Billing string `json:"billing"`
	Model   string `json:"model,omitempty"`
	Default bool   `json:"default,omitempty"`
	// Program is a plain command's program, looked for on PATH.
	Program *CLIView `json:"program,omitempty"`
}

// ProviderMember is a member as diagnostics show it.
type ProviderMember struct {
	Name        string `json:"name"`
	Profile     string `json:"profile,omitempty"`
	Runtime     string `json:"runtime,omitempty"`
	Phase       string `json:"phase,omitempty"`
	AgentStatus string `json:"agentStatus,omitempty"`
	Restarts    int32  `json:"restarts,omitempty"`
	// LastStartFailure is why its agent is not running now, while that
	// lasts.
	LastStartFailure *StartFailure `json:"lastStartFailure,omitempty"`
	// LastRestart is why its pane was last recreated.
	LastRestart *MemberRestart `json:"lastRestart,omitempty"`
}

// StartFailure is a Member condition that says its agent could not start.
type StartFailure struct {
	Condition string `json:"condition"`
	Reason    string `json:"reason"`
	Message   string `json:"message,omitempty"`
	Since     string `json:"since,omitempty"`
}

// MemberRestart is the last time a member's pane was recreated, and why.
type MemberRestart struct {
	Reason string `json:"reason"`
	At     string `json:"at,omitempty"`
}

// TeamManagePermissions is the team policy as capabilities show it.
type TeamManagePermissions struct {
	NonLeadCanAdd    bool `json:"nonLeadCanAdd"`
	NonLeadCanRemove bool `json:"nonLeadCanRemove"`
}

// NamespaceCapability says whether a tool namespace is on and what it holds.
type NamespaceCapability struct {
	Name    ToolNamespace `json:"name"`
	Enabled bool          `json:"enabled"`
	// Tools are the namespace's tools, or none when it is off.
	Tools []string `json:"tools"`
}

// errorBody is the body of every REST error.
type errorBody struct {
	Error *toolerr.Error `json:"error" jsonschema:"what went wrong"`
}

// failure is embedded in every tool output: a failed call returns only
// {error:{code,message}} with isError set.
type failure struct {
	Error *toolerr.Error `json:"error,omitempty" jsonschema:"set when the call failed; the other fields are then absent"`
}

func (f *failure) setError(e *toolerr.Error) { f.Error = e }

func (f *failure) metricOutcome() string { return "ok" }
