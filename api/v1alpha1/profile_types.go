package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Billing says how a worker's model usage is paid for.
// +kubebuilder:validation:Enum=subscription;api
type Billing string

const (
	// BillingSubscription runs the agent on its own logged-in subscription.
	// Such a worker must never see an API endpoint or key.
	BillingSubscription Billing = "subscription"
	// BillingAPI runs the agent against an API endpoint named in the
	// Profile's env: ANTHROPIC_BASE_URL, or OPENAI_BASE_URL for codex.
	BillingAPI Billing = "api"
)

// BillingOf is the billing mode a Profile's workers run with: subscription
// unless it says api. A Member without a Profile cannot carry an API
// endpoint, so it runs on a subscription too (p nil).
func BillingOf(p *Profile) Billing {
	if p == nil || p.Spec.Billing == "" {
		return BillingSubscription
	}
	return p.Spec.Billing
}

// Effort is how hard a worker's model thinks.
// +kubebuilder:validation:Enum=low;medium;high;xhigh;max
type Effort string

// GitIdentity is who a worker's git commits are by.
type GitIdentity struct {
	// name is the author's and committer's name, as git shows it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[<>\\n\\x00]')",message="a git name may not hold '<', '>', a newline or NUL"
	Name string `json:"name"`

	// email is the author's and committer's email address.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=254
	// +kubebuilder:validation:XValidation:rule="self.matches('^[^@<> \\t\\n]+@[^@<> \\t\\n]+$')",message="email must be an address such as agent@example.com, with no spaces or angle brackets"
	Email string `json:"email"`
}

// ProfileSpec is a named way to run a worker.
// +kubebuilder:validation:XValidation:rule="!has(self.permissionMode) || (has(self.agent) && ((self.agent == 'claude' && self.permissionMode in ['dontAsk', 'default', 'acceptEdits', 'plan', 'auto', 'bypassPermissions']) || (self.agent == 'codex' && self.permissionMode in ['never', 'on-request'])))",message="permissionMode is one of dontAsk, default, acceptEdits, plan, auto, bypassPermissions for agent: claude, and never or on-request for agent: codex"
// +kubebuilder:validation:XValidation:rule="!has(self.allowedTools) || (has(self.agent) && self.agent == 'claude')",message="allowedTools applies to agent: claude"
// +kubebuilder:validation:XValidation:rule="self.billing != 'api' || (has(self.env) && self.env.exists(e, e.name == (has(self.agent) && self.agent == 'codex' ? 'OPENAI_BASE_URL' : 'ANTHROPIC_BASE_URL')))",message="billing: api requires ANTHROPIC_BASE_URL in env (OPENAI_BASE_URL for agent: codex)"
// +kubebuilder:validation:XValidation:rule="self.billing != 'subscription' || !has(self.env) || !self.env.exists(e, e.name in ['ANTHROPIC_BASE_URL', 'ANTHROPIC_API_KEY', 'ANTHROPIC_AUTH_TOKEN', 'OPENAI_BASE_URL', 'OPENAI_API_KEY', 'CODEX_API_KEY'])",message="billing: subscription must not set ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, OPENAI_BASE_URL, OPENAI_API_KEY or CODEX_API_KEY in env"
// +kubebuilder:validation:XValidation:rule="!has(self.pod) || !has(self.runtime) || self.runtime == 'Pod'",message="pod applies only to runtime: Pod"
// +kubebuilder:validation:XValidation:rule="!has(self.warmPool) || self.warmPool.size == 0 || (has(self.runtime) && self.runtime == 'Pod')",message="warmPool needs runtime: Pod: warm Pods are members' Pods"
// +kubebuilder:validation:XValidation:rule="!has(self.warmPool) || self.warmPool.size == 0 || !has(self.pod) || !has(self.pod.workspace) || !has(self.pod.workspace.volumeClaim)",message="warmPool needs an emptyDir workspace: a member's workspace claim can be mounted only when its Pod starts, so a warm Pod could never hold it"
type ProfileSpec struct {
	WorkerSpec `json:",inline"`

	// description says what this profile is for; bridge_profiles shows it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`

	// git is who the agent's commits are by: its author and committer.
	// fleetd sets GIT_AUTHOR_NAME, GIT_AUTHOR_EMAIL, GIT_COMMITTER_NAME
	// and GIT_COMMITTER_EMAIL in the pane; a variable env sets wins.
	// +optional
	Git *GitIdentity `json:"git,omitempty"`

	// model is the model the agent runs (passed as --model to claude and codex).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:/\[\]-]*$`
	Model string `json:"model,omitempty"`

	// effort is the reasoning effort the agent uses.
	// +optional
	Effort Effort `json:"effort,omitempty"`

	// billing is subscription (the agent's own login) or api (an endpoint in
	// env). Defaults to subscription.
	// +optional
	// +kubebuilder:default=subscription
	Billing Billing `json:"billing,omitempty"`

	// pricing is what the model costs; with it, each member's status says
	// what its tokens cost. fleetd has no prices of its own.
	// +optional
	Pricing *Pricing `json:"pricing,omitempty"`

	// permissionMode is how the agent asks before it runs a tool that is
	// not allowed. For claude: dontAsk (the default: allowed tools run,
	// every other one is refused without asking), default (a dialog asks,
	// and the worker shows blocked until someone answers), acceptEdits
	// (file edits run too), plan (nothing is changed), auto (a classifier
	// request to the model decides each call) or bypassPermissions
	// (everything runs; Claude Code refuses it as root unless env sets
	// IS_SANDBOX=1). For codex, its approval policy: never (the default: a
	// command that needs more than the sandbox allows is refused without
	// asking) or on-request (a dialog asks, and the worker shows blocked).
	// fleetd's own tools never ask in any mode.
	// +optional
	// +kubebuilder:validation:Enum=dontAsk;default;acceptEdits;plan;auto;bypassPermissions;never;on-request
	PermissionMode string `json:"permissionMode,omitempty"`

	// allowedTools are tools the agent may run without asking, beyond
	// fleetd's own, in the agent's rule syntax (Claude Code:
	// "Bash(git diff:*)", "Edit", "mcp__github").
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +listType=atomic
	AllowedTools []string `json:"allowedTools,omitempty"`

	// runtime says where its members run: Pod (a Pod of their own) or
	// Shared (panes of the pane server beside fleetd). Default: fleetd's
	// --default-runtime. A Member's own runtime wins.
	// +optional
	Runtime Runtime `json:"runtime,omitempty"`

	// pod shapes the Pods its members run in; each field a Member's own
	// pod sets replaces the Profile's, except image, serviceAccountName,
	// tolerations and runtimeClassName, which are the Profile's alone. A
	// Profile may open more than Pod Security restricted only when its
	// writer may create Pods in its namespace (config/admission).
	// +optional
	Pod *MemberPod `json:"pod,omitempty"`

	// idle suspends its members once idle this long (a Member's own idle
	// wins); only members in Pods of their own with a workspace claim are
	// suspended.
	// +optional
	Idle *MemberIdle `json:"idle,omitempty"`

	// warmPool keeps Pods of this profile started ahead of any Member, so a
	// new Member takes one instead of starting one: its pane host up,
	// fleetd's tools in place and the profile's agent started in it. A
	// Member claims a warm Pod when it runs from this profile with no pod
	// of its own, and takes over its agent when it has no args of its
	// own; with none free it starts its own Pod, as without a pool.
	// +optional
	WarmPool *WarmPool `json:"warmPool,omitempty"`

	// default marks the profile bridge_send auto-spawns from when no member is
	// addressed and none exists. At most one profile per namespace should set it;
	// when several do, the oldest wins.
	// +optional
	Default bool `json:"default,omitempty"`
}

// WarmPool is how many Pods a Profile keeps started for Members to claim.
type WarmPool struct {
	// size is how many unclaimed Pods are kept: each one claimed is
	// replaced in the background. 0 keeps none.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Size int32 `json:"size"`
}

// WarmPoolStatus is what a Profile's warm pool holds.
type WarmPoolStatus struct {
	// free counts the warm Pods ready to be claimed: the Pod ready, and the
	// agent started in it ahead ready for work.
	// +optional
	Free int32 `json:"free,omitempty"`

	// starting counts the warm Pods not ready yet, or whose agent is not.
	// +optional
	Starting int32 `json:"starting,omitempty"`

	// claimed counts the Members running in a Pod they claimed from the
	// pool.
	// +optional
	Claimed int32 `json:"claimed,omitempty"`
}

// ProfileStatus is the observed state of a Profile.
type ProfileStatus struct {
	// members counts the Members that run from this profile.
	// +optional
	Members int32 `json:"members,omitempty"`

	// warmPool is what the profile's warm pool holds, when it has one.
	// +optional
	WarmPool *WarmPoolStatus `json:"warmPool,omitempty"`

	// conditions: Ready says whether members can be started from this
	// profile: every Secret its env refers to exists.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=prof,categories=fleet
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.spec.agent`
// +kubebuilder:printcolumn:name="Command",type=string,JSONPath=`.spec.command[0]`,priority=1
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.model`
// +kubebuilder:printcolumn:name="Billing",type=string,JSONPath=`.spec.billing`
// +kubebuilder:printcolumn:name="Default",type=boolean,JSONPath=`.spec.default`,priority=1
// +kubebuilder:printcolumn:name="Members",type=integer,JSONPath=`.status.members`
// +kubebuilder:printcolumn:name="Warm",type=integer,JSONPath=`.status.warmPool.free`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Profile is a named way to run a worker: agent kind or command, args, env,
// working directory, model, effort and billing. Members reference it by name.
type Profile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is how to run a worker.
	// +required
	Spec ProfileSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status ProfileStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ProfileList is a list of Profiles.
type ProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Profile `json:"items"`
}
