package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// AgentKind names an agent that herdr knows how to start with agent.start
// (claude, codex, gemini, opencode, ...). herdr refuses kinds it does not know.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]*$`
type AgentKind string

// Agent kinds that herdr starts natively and fleetd configures for its gateway.
const (
	// AgentClaude is Claude Code.
	AgentClaude AgentKind = "claude"
	// AgentCodex is OpenAI Codex CLI.
	AgentCodex AgentKind = "codex"
)

// EnvVar is one environment variable of a worker's pane. Values come only from
// the Profile or Member spec; fleetd never forwards its own environment.
type EnvVar struct {
	// name of the variable. Must be a C identifier.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`

	// value of the variable. Exactly one of value and valueFrom is set.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Value *string `json:"value,omitempty"`

	// valueFrom takes the value from a key of a Secret in the same namespace.
	// +optional
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

// EnvVarSource is where a variable's value comes from.
type EnvVarSource struct {
	// secretKeyRef selects a key of a Secret in the object's namespace.
	// +required
	SecretKeyRef corev1.SecretKeySelector `json:"secretKeyRef"`
}

// WorkerSpec is how to run one worker: the part a Profile and an inline
// Member share.
// +kubebuilder:validation:XValidation:rule="has(self.agent) != has(self.command)",message="exactly one of agent (a herdr agent kind) or command (a plain command) must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.args) || has(self.agent)",message="args apply only to an agent; put a plain command's arguments in command"
type WorkerSpec struct {
	// agent is the herdr agent kind to start with agent.start (claude, codex, ...).
	// Mutually exclusive with command.
	// +optional
	Agent AgentKind `json:"agent,omitempty"`

	// command is a plain command line typed into the pane's shell, for agents
	// herdr does not know (and for the scripted test agent). Mutually exclusive
	// with agent.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +listType=atomic
	Command []string `json:"command,omitempty"`

	// args are extra arguments passed to the agent.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +listType=atomic
	Args []string `json:"args,omitempty"`

	// env is the pane's environment beyond what fleetd sets itself
	// (FLEETD_MCP_URL, FLEETD_TOKEN, FLEETD_MEMBER).
	// +optional
	// +kubebuilder:validation:MaxItems=128
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:XValidation:rule="self.all(e, has(e.value) != has(e.valueFrom))",message="each env entry sets exactly one of value or valueFrom"
	// +kubebuilder:validation:XValidation:rule="self.all(e, !e.name.startsWith('FLEETD_') && !e.name.startsWith('HERDR_'))",message="env names starting with FLEETD_ or HERDR_ are reserved for fleetd and herdr"
	Env []EnvVar `json:"env,omitempty"`

	// workingDir is the directory the pane starts in.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	WorkingDir string `json:"workingDir,omitempty"`
}
