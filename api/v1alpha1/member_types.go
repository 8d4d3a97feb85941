package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Role is a member's standing in its team.
// +kubebuilder:validation:Enum=lead;member
type Role string

const (
	// RoleLead may add and remove team members.
	RoleLead Role = "lead"
	// RoleMember is an ordinary team member.
	RoleMember Role = "member"
)

// AgentStatus is the agent's status as herdr reports it.
// +kubebuilder:validation:Enum=idle;working;blocked;done;unknown
type AgentStatus string

const (
	// AgentIdle waits for input.
	AgentIdle AgentStatus = "idle"
	// AgentWorking is busy with a turn.
	AgentWorking AgentStatus = "working"
	// AgentBlocked shows a dialog; typing would answer it.
	AgentBlocked AgentStatus = "blocked"
	// AgentDone is idle but its last output is unseen; fleetd treats it as idle.
	AgentDone AgentStatus = "done"
	// AgentUnknown has not reported.
	AgentUnknown AgentStatus = "unknown"
)

// MemberPhase is a one-word summary of a Member's lifecycle.
// +kubebuilder:validation:Enum=Pending;Starting;Ready;Restarting;Suspended;Failed;Terminating
type MemberPhase string

const (
	// MemberPending has no pane yet.
	MemberPending MemberPhase = "Pending"
	// MemberStarting has a pane whose agent is not ready yet.
	MemberStarting MemberPhase = "Starting"
	// MemberReady has a live pane with a ready agent.
	MemberReady MemberPhase = "Ready"
	// MemberRestarting lost its pane and waits to recreate it.
	MemberRestarting MemberPhase = "Restarting"
	// MemberSuspended has no Pod: it was idle past spec.idle.suspendAfter,
	// or spec.suspend asked. Its workspace claim and its agent's session
	// are kept, and a message resumes it.
	MemberSuspended MemberPhase = "Suspended"
	// MemberFailed cannot run until its spec or environment changes.
	MemberFailed MemberPhase = "Failed"
	// MemberTerminating is being deleted.
	MemberTerminating MemberPhase = "Terminating"
)

// MemberSpec is one agent in one herdr pane: either a Profile reference or an
// inline worker.
// +kubebuilder:validation:XValidation:rule="has(self.profile) ? !has(self.agent) && !has(self.command) : (has(self.agent) != has(self.command))",message="set exactly one of profile, agent or command"
// +kubebuilder:validation:XValidation:rule="!has(self.args) || has(self.agent) || has(self.profile)",message="args apply only to an agent or a profile; put a plain command's arguments in command"
// +kubebuilder:validation:XValidation:rule="!has(self.profile) || (!has(self.env) && !has(self.workingDir))",message="env and workingDir come from the profile when profile is set"
// +kubebuilder:validation:XValidation:rule="!has(self.pod) || !has(self.runtime) || self.runtime == 'Pod'",message="pod applies only to runtime: Pod"
// +kubebuilder:validation:XValidation:rule="!(has(self.suspend) || has(self.idle)) || !has(self.runtime) || self.runtime == 'Pod'",message="suspend and idle apply only to runtime: Pod; a member on the shared pane server is never suspended"
type MemberSpec struct {
	// profile names a Profile in the Member's namespace to run the worker from.
	// Mutually exclusive with agent and command.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Profile string `json:"profile,omitempty"`

	// agent is an inline herdr agent kind (claude, codex, ...), for a Member
	// without a profile.
	// +optional
	Agent AgentKind `json:"agent,omitempty"`

	// command is an inline plain command, for a Member without a profile.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +listType=atomic
	Command []string `json:"command,omitempty"`

	// args are extra agent arguments, appended to the profile's.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +listType=atomic
	Args []string `json:"args,omitempty"`

	// env is the inline worker's environment.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:XValidation:rule="self.all(e, has(e.value) != has(e.valueFrom))",message="each env entry sets exactly one of value or valueFrom"
	// +kubebuilder:validation:XValidation:rule="self.all(e, !e.name.startsWith('FLEETD_') && !e.name.startsWith('HERDR_'))",message="env names starting with FLEETD_ or HERDR_ are reserved for fleetd and herdr"
	// +kubebuilder:validation:XValidation:rule="!self.exists(e, e.name in ['ANTHROPIC_BASE_URL', 'ANTHROPIC_API_KEY', 'ANTHROPIC_AUTH_TOKEN', 'OPENAI_BASE_URL', 'OPENAI_API_KEY', 'CODEX_API_KEY'])",message="API endpoints (ANTHROPIC_BASE_URL, OPENAI_BASE_URL) and API keys belong in a Profile with billing: api"
	Env []EnvVar `json:"env,omitempty"`

	// workingDir is the inline worker's starting directory.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	WorkingDir string `json:"workingDir,omitempty"`

	// team groups members for the team tools.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Team string `json:"team,omitempty"`

	// role is lead or member (default). Leads manage their team.
	// +optional
	// +kubebuilder:default=member
	Role Role `json:"role,omitempty"`

	// runtime says where the agent runs: Pod (a Pod of its own) or Shared
	// (a pane of the pane server beside fleetd). Default: the Profile's,
	// else fleetd's --default-runtime. Fixed for the life of the Member once
	// it started.
	// +optional
	Runtime Runtime `json:"runtime,omitempty"`

	// pod shapes the Member's Pod when it runs in one: each field it sets
	// replaces its Profile's. A Member's own pod stays within Pod Security
	// restricted and may not set image, tolerations, runtimeClassName or a
	// serviceAccountName other than default; those only a Profile opens
	// (config/admission enforces it, and fleetd makes no Pod beyond it).
	// +optional
	Pod *MemberPod `json:"pod,omitempty"`

	// suspend true suspends the member as soon as no message is in flight
	// to it: its Pod is deleted, and its workspace claim and its agent's
	// session are kept. While it is true, messages wait in the queue.
	// false (or unset) resumes a member suspended this way; one suspended
	// for being idle resumes when a message comes. Only a member in a Pod
	// of its own with a workspace claim (spec.pod.workspace.volumeClaim,
	// or its Profile's) is suspended: its Suspended condition says why not
	// otherwise.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`

	// idle suspends the member once it has been idle this long, with no
	// message queued or in flight and no open question. Default: the
	// Profile's; without either, an idle member is never suspended.
	// +optional
	Idle *MemberIdle `json:"idle,omitempty"`
}

// MemberIdle says when an idle member is suspended.
type MemberIdle struct {
	// suspendAfter is how long the member stays idle, with nothing queued
	// or in flight to it and no open question, before it is suspended; at
	// least 1s, such as 30m.
	// +required
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="suspendAfter must be a duration of at least 1s, such as 30m"
	SuspendAfter *metav1.Duration `json:"suspendAfter"`
}

// MemberStatus is the observed state of a Member.
type MemberStatus struct {
	// phase is a one-word summary: Pending, Starting, Ready, Restarting, Failed
	// or Terminating.
	// +optional
	Phase MemberPhase `json:"phase,omitempty"`

	// conditions: Ready (rollup), PaneReady, AgentReady, HerdrReachable,
	// for agents fleetd hooks (Claude Code, Codex) AgentHooks, for pod
	// members PodScheduled, and for members that may be suspended (idle or
	// suspend set) Suspended.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// paneID is herdr's id of the member's pane (changes when recreated).
	// +optional
	PaneID string `json:"paneID,omitempty"`

	// workspaceID is herdr's id of the member's workspace.
	// +optional
	WorkspaceID string `json:"workspaceID,omitempty"`

	// tabID is herdr's id of the pane's tab.
	// +optional
	TabID string `json:"tabID,omitempty"`

	// terminalID is herdr's id of the pane's terminal.
	// +optional
	TerminalID string `json:"terminalID,omitempty"`

	// agentKind is the herdr agent kind the member runs (claude, codex, ...),
	// empty for a plain command.
	// +optional
	AgentKind AgentKind `json:"agentKind,omitempty"`

	// agentSessionID is the agent's own session id, when it reported one.
	// It is kept while the member is suspended: a resume starts the agent
	// on it.
	// +optional
	AgentSessionID string `json:"agentSessionID,omitempty"`

	// suspendedAt is when the member was suspended (its Pod deleted); unset
	// while it runs.
	// +optional
	SuspendedAt *metav1.Time `json:"suspendedAt,omitempty"`

	// resumingSessionID is the saved agent session the current pane was
	// started on to resume the member, until the agent is ready on it (or
	// exits, and a fresh session starts instead).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	ResumingSessionID string `json:"resumingSessionID,omitempty"`

	// agentStatus is the agent's last status as herdr reports it.
	// +optional
	AgentStatus AgentStatus `json:"agentStatus,omitempty"`

	// agentMessage is what a blocked agent waits for: the dialog on its
	// screen, or what its hook said. Empty while it is not blocked.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	AgentMessage string `json:"agentMessage,omitempty"`

	// agentStatusSince is when agentStatus last changed.
	// +optional
	AgentStatusSince *metav1.Time `json:"agentStatusSince,omitempty"`

	// contextRemainingPercent is how much of its context window the agent's
	// session had left at its latest model call, where the agent reports
	// its usage (the transcripts of Claude Code and Codex).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	ContextRemainingPercent *int32 `json:"contextRemainingPercent,omitempty"`

	// usage is what the agent's model calls used, from the transcripts of
	// Claude Code and Codex, and its cost at the Profile's pricing.
	// +optional
	Usage *MemberUsage `json:"usage,omitempty"`

	// stateChangeSeq is herdr's state_change_seq for the pane's agent: it
	// advances on every status change, so a pickup between two samples shows.
	// +optional
	StateChangeSeq int64 `json:"stateChangeSeq,omitempty"`

	// workingSeq is the stateChangeSeq at which the agent was last seen
	// working or blocked: a message typed at an earlier seq was picked up.
	// A status that only flickers (idle, unknown, idle) leaves it alone.
	// +optional
	WorkingSeq int64 `json:"workingSeq,omitempty"`

	// restarts counts how often the pane was recreated.
	// +optional
	Restarts int32 `json:"restarts,omitempty"`

	// lastRestartReason says why the pane was last recreated.
	// +optional
	LastRestartReason string `json:"lastRestartReason,omitempty"`

	// lastRestartTime is when the pane was last recreated.
	// +optional
	LastRestartTime *metav1.Time `json:"lastRestartTime,omitempty"`

	// tokenSecretName names the Secret holding the member's gateway token.
	// +optional
	TokenSecretName string `json:"tokenSecretName,omitempty"`

	// tokenHash is the SHA-256 of the member's gateway token, in hex. The
	// gateway knows a member by it: only fleetd writes a Member's status, so
	// a Secret made by anyone else never authenticates anyone.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	TokenHash string `json:"tokenHash,omitempty"`

	// runtime is where the agent runs: Shared or Pod, decided when the
	// Member first started.
	// +optional
	Runtime Runtime `json:"runtime,omitempty"`

	// podName names the Pod the agent runs in, for a pod member.
	// +optional
	PodName string `json:"podName,omitempty"`

	// podUID is that Pod's UID. The gateway knows a pod member by it: a
	// token of a Pod that is not the Member's current one is refused.
	// +optional
	PodUID string `json:"podUID,omitempty"`

	// podPool names the Profile whose warm pool the Pod was claimed from;
	// empty for a Pod started for the Member.
	// +optional
	PodPool string `json:"podPool,omitempty"`

	// podIP is where the controllers reach the Pod's pane host.
	// +optional
	PodIP string `json:"podIP,omitempty"`

	// nodeName is the node the Pod runs on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// workingDir is where the agent works, as a path where it runs: the
	// files a member sends as images lie within it.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	WorkingDir string `json:"workingDir,omitempty"`

	// agentDir is the member's agent directory, as a path where it runs,
	// for a known agent: images sent to the member are put there.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	AgentDir string `json:"agentDir,omitempty"`

	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mem,categories=fleet
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z][a-z0-9_-]{0,31}$')",message="metadata.name must be usable as a herdr agent name: a lowercase letter, then at most 31 lowercase letters, digits, '-' or '_'"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Agent Status",type=string,JSONPath=`.status.agentStatus`
// +kubebuilder:printcolumn:name="Pane",type=string,JSONPath=`.status.paneID`
// +kubebuilder:printcolumn:name="Team",type=string,JSONPath=`.spec.team`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.role`
// +kubebuilder:printcolumn:name="Suspended",type=date,JSONPath=`.status.suspendedAt`
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=`.status.restarts`,priority=1
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`,priority=1
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.status.podName`,priority=1
// +kubebuilder:printcolumn:name="Shard",type=string,JSONPath=`.metadata.labels['fleet\.fleetd\.dev/shard']`,priority=1
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.status.podPool`,priority=1
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.spec.profile`,priority=1
// +kubebuilder:printcolumn:name="Input",type=integer,JSONPath=`.status.usage.inputTokens`,priority=1
// +kubebuilder:printcolumn:name="Output",type=integer,JSONPath=`.status.usage.outputTokens`,priority=1
// +kubebuilder:printcolumn:name="Cached",type=integer,JSONPath=`.status.usage.cachedTokens`,priority=1
// +kubebuilder:printcolumn:name="Cost",type=string,JSONPath=`.status.usage.cost`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Member is one AI coding agent running in one herdr pane. The controller
// starts it, keeps it alive and mirrors its status.
type Member struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired agent.
	// +required
	Spec MemberSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status MemberStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MemberList is a list of Members.
type MemberList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Member `json:"items"`
}
