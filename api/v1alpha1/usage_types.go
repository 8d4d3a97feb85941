package v1alpha1

// TokenUsage counts the tokens of an agent's model calls, as the agent's
// own transcript records them (Claude Code's session file, Codex's
// rollout). The four counts never overlap: their sum is every token the
// calls sent and received.
type TokenUsage struct {
	// inputTokens are the input tokens neither read from nor written to a
	// prompt cache.
	// +optional
	// +kubebuilder:validation:Minimum=0
	InputTokens int64 `json:"inputTokens,omitempty"`

	// outputTokens are the tokens the model wrote, reasoning included.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OutputTokens int64 `json:"outputTokens,omitempty"`

	// cachedTokens are the input tokens read from a prompt cache.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CachedTokens int64 `json:"cachedTokens,omitempty"`

	// cacheCreationTokens are the input tokens written to a prompt cache
	// (Claude Code reports them; Codex has none).
	// +optional
	// +kubebuilder:validation:Minimum=0
	CacheCreationTokens int64 `json:"cacheCreationTokens,omitempty"`

	// calls counts the model calls.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Calls int64 `json:"calls,omitempty"`
}

// MemberUsage is what a Member's agent used, summed over every session
// of it fleetd has seen, and what that cost.
type MemberUsage struct {
	TokenUsage `json:",inline"`

	// cost is what the tokens cost at the member's Profile's pricing now, a
	// decimal in currency; empty when the Profile sets no pricing.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Cost string `json:"cost,omitempty"`

	// currency is cost's currency, the Profile's pricing.currency.
	// +optional
	// +kubebuilder:validation:MaxLength=3
	Currency string `json:"currency,omitempty"`

	// transcript is how far fleetd has counted the agent's current
	// transcript, so each pass reads only what was added since.
	// +optional
	Transcript *TranscriptCursor `json:"transcript,omitempty"`

	// turn is the turn under way in the transcript: the message whose
	// prompt started it, and what its model calls used so far. fleetd
	// copies it to that Delegation's status.usage.
	// +optional
	Turn *TurnUsage `json:"turn,omitempty"`
}

// TurnUsage is what one turn of an agent used: the model calls after a
// prompt, up to the next prompt.
type TurnUsage struct {
	TokenUsage `json:",inline"`

	// delegation names the Delegation whose message was the turn's
	// prompt; empty for a prompt fleetd did not type.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Delegation string `json:"delegation,omitempty"`
}

// DelegationUsage is what the turn a message started used, and what that
// cost.
type DelegationUsage struct {
	TokenUsage `json:",inline"`

	// cost is what the tokens cost at the member's Profile's pricing when
	// they were counted, a decimal in currency; empty when the Profile sets
	// no pricing.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Cost string `json:"cost,omitempty"`

	// currency is cost's currency, the Profile's pricing.currency.
	// +optional
	// +kubebuilder:validation:MaxLength=3
	Currency string `json:"currency,omitempty"`
}

// TranscriptCursor is where counting an agent's transcript stopped.
type TranscriptCursor struct {
	// path is the transcript, as a path where the agent runs.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path"`

	// offset is the byte after the last whole line counted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Offset int64 `json:"offset,omitempty"`

	// lastID names the latest entry counted: Claude Code writes one line
	// per part of a model call, each with the call's usage, under the
	// call's message id.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	LastID string `json:"lastID,omitempty"`

	// last is what the latest entry counted said: the usage of the call
	// lastID names (Claude Code), or the session's running total (Codex).
	// +optional
	Last TokenUsage `json:"last,omitempty"`
}

// Pricing is what a Profile's model costs, per million tokens, in one
// currency. fleetd knows no prices of its own: they change, and only the
// Profile's writer knows what they pay.
type Pricing struct {
	// currency is an ISO 4217 code, such as USD or EUR.
	// +required
	// +kubebuilder:validation:Pattern=`^[A-Z]{3}$`
	Currency string `json:"currency"`

	// inputPerMTok is the price of a million input tokens, a decimal such
	// as "3" or "0.25".
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}(\.[0-9]{1,6})?$`
	InputPerMTok string `json:"inputPerMTok"`

	// outputPerMTok is the price of a million output tokens.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}(\.[0-9]{1,6})?$`
	OutputPerMTok string `json:"outputPerMTok"`

	// cachedInputPerMTok is the price of a million input tokens read from a
	// prompt cache. Defaults to inputPerMTok.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}(\.[0-9]{1,6})?$`
	CachedInputPerMTok string `json:"cachedInputPerMTok,omitempty"`

	// cacheWritePerMTok is the price of a million input tokens written to
	// a prompt cache. Defaults to inputPerMTok.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}(\.[0-9]{1,6})?$`
	CacheWritePerMTok string `json:"cacheWritePerMTok,omitempty"`
}
