package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PrincipalKind is the kind of caller the gateway resolved from a token.
// +kubebuilder:validation:Enum=Member;ServiceAccount;Static;User
type PrincipalKind string

const (
	// PrincipalMember is a worker calling with its member token.
	PrincipalMember PrincipalKind = "Member"
	// PrincipalServiceAccount is a pod calling with a service-account token.
	PrincipalServiceAccount PrincipalKind = "ServiceAccount"
	// PrincipalStatic is a client calling with a static token (local use).
	PrincipalStatic PrincipalKind = "Static"
	// PrincipalUser is a Kubernetes user who created a Delegation with
	// kubectl; it reads the outcome there, not through the gateway.
	PrincipalUser PrincipalKind = "User"
)

// Principal is who sent a Delegation, as the gateway resolved it from the
// connection's token; never taken from a tool argument. Created any other
// way (kubectl), it names the creator: the admission policy in
// config/admission sets it so when it is left out and refuses any other,
// unless the creator is fleetd itself.
type Principal struct {
	// kind is Member, ServiceAccount, Static or User.
	// +required
	Kind PrincipalKind `json:"kind"`

	// name is the member's name, the service account as
	// system:serviceaccount:<namespace>:<name>, the static token's name, or
	// the Kubernetes user's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	Name string `json:"name"`
}

// DelegationPhase is where a Delegation is in its life.
// +kubebuilder:validation:Enum=Pending;Queued;Delivered;Working;Asking;Replied;TurnDone;TimedOut;Failed;WorkerGone;Cancelled
type DelegationPhase string

const (
	// DelegationPending is a Delegation with no phase recorded; the API
	// server shows a new one as Queued.
	DelegationPending DelegationPhase = "Pending"
	// DelegationQueued waits in its member's queue.
	DelegationQueued DelegationPhase = "Queued"
	// DelegationDelivered was typed into the member's pane; no pickup seen yet.
	DelegationDelivered DelegationPhase = "Delivered"
	// DelegationWorking was picked up: the member works on it.
	DelegationWorking DelegationPhase = "Working"
	// DelegationAsking has an open question from the worker to the sender.
	DelegationAsking DelegationPhase = "Asking"
	// DelegationReplied settled with the worker's reply.
	DelegationReplied DelegationPhase = "Replied"
	// DelegationTurnDone settled because the worker ended its turn without
	// replying; status.tail holds the terminal's last lines.
	DelegationTurnDone DelegationPhase = "TurnDone"
	// DelegationTimedOut settled because its deadline passed. A reply that
	// arrives later is still recorded and takes the detached path.
	DelegationTimedOut DelegationPhase = "TimedOut"
	// DelegationFailed settled because it could not be delivered.
	DelegationFailed DelegationPhase = "Failed"
	// DelegationWorkerGone settled because its member or pane went away.
	DelegationWorkerGone DelegationPhase = "WorkerGone"
	// DelegationCancelled settled because it was withdrawn.
	DelegationCancelled DelegationPhase = "Cancelled"
)

// Outcome is the result a waiting sender gets.
// +kubebuilder:validation:Enum=reply;turn_done;timeout;delivery_failed;worker_gone;cancelled
type Outcome string

const (
	// OutcomeReply carries the worker's bridge_reply.
	OutcomeReply Outcome = "reply"
	// OutcomeTurnDone carries the terminal tail of a turn that ended without a reply.
	OutcomeTurnDone Outcome = "turn_done"
	// OutcomeTimeout says the deadline passed.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeDeliveryFailed says herdr refused the delivery.
	OutcomeDeliveryFailed Outcome = "delivery_failed"
	// OutcomeWorkerGone says the member or its pane went away.
	OutcomeWorkerGone Outcome = "worker_gone"
	// OutcomeCancelled says the Delegation was withdrawn.
	OutcomeCancelled Outcome = "cancelled"
)

// Limits shared by the API schema and the gateway.
const (
	// MaxContentBytes bounds a message, a reply, a question or an answer.
	MaxContentBytes = 65536
	// MaxTimeoutSeconds bounds a Delegation's deadline.
	MaxTimeoutSeconds = 86400
	// DefaultTimeoutSeconds is a Delegation's deadline when none is given.
	DefaultTimeoutSeconds = 600
	// MaxQuestions bounds the questions one Delegation can carry.
	MaxQuestions = 32
	// MaxImages bounds the images sent with one message.
	MaxImages = 4
	// MaxImageBytes bounds the bytes of all images sent with one message:
	// what one Secret holds.
	MaxImageBytes = 1 << 20
)

// DelegationSpec is one message to one member. It never changes after
// creation.
type DelegationSpec struct {
	// from is the sender, as the gateway resolved it from the connection.
	// +required
	From Principal `json:"from"`

	// to names the receiving Member in the Delegation's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_-]{0,31}$`
	To string `json:"to"`

	// content is the message typed into the member's pane.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=65536
	Content string `json:"content"`

	// wait is true when the sender blocks for the outcome (bridge_send) and
	// false when it was dispatched (bridge_send wait:false). A reply nobody
	// waits for is injected into a member sender's pane, or kept for
	// bridge_poll.
	// +optional
	// +kubebuilder:default=true
	Wait *bool `json:"wait,omitempty"`

	// timeoutSeconds is the deadline, counted from creation.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// idempotencyKey makes a retried send find this Delegation instead of
	// sending twice.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	IdempotencyKey string `json:"idempotencyKey,omitempty"`

	// inReplyTo names the Delegation whose reply this one carries back to its
	// sender's pane (the detached path).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	InReplyTo string `json:"inReplyTo,omitempty"`

	// hops counts the messages chained before this one without a primary's
	// message in between: a message a member sends while it works on one,
	// and a reply carried back to a member's pane, are each one hop further
	// than the message they follow. The loop guard refuses a chain that
	// grows too long.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Hops int32 `json:"hops,omitempty"`

	// images are pictures sent with the message, for a member whose agent
	// takes images (Claude Code, Codex).
	// +optional
	Images *DelegationImages `json:"images,omitempty"`
}

// DelegationImages are the images sent with a message. Their bytes are in a
// Secret written once, not in the Delegation: a Delegation is rewritten at
// every step of its life and held in the cache of every gateway and
// controller, so bytes in it would be paid for many times over, while the
// Secret is read once, at delivery, and never cached.
type DelegationImages struct {
	// secretName names the Secret, in the Delegation's namespace and of
	// type fleet.fleetd.dev/images, that holds each image under its key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`

	// items are the images, in the order the sender gave them.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +listType=atomic
	Items []DelegationImage `json:"items"`
}

// DelegationImage is one image sent with a message.
type DelegationImage struct {
	// key is the image's key in the Secret, and its file name where the
	// member's agent reads it.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9]{1,2}\.(png|jpg|gif|webp)$`
	Key string `json:"key"`

	// mediaType is the image's type, from its bytes.
	// +required
	// +kubebuilder:validation:Enum=image/png;image/jpeg;image/gif;image/webp
	MediaType string `json:"mediaType"`

	// size is the image's length in bytes.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1048576
	Size int64 `json:"size"`

	// sha256 is the hex SHA-256 of the image's bytes: the bytes delivered
	// are checked against it.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	SHA256 string `json:"sha256"`

	// name is what the sender called the image (its file's name), for
	// people.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Name string `json:"name,omitempty"`
}

// Question is one bridge_ask from the worker, and its answer.
type Question struct {
	// turnID identifies the question; the sender answers with bridge_send{turnId}.
	// +required
	// +kubebuilder:validation:MaxLength=300
	TurnID string `json:"turnID"`

	// text is the worker's question.
	// +required
	// +kubebuilder:validation:MaxLength=65536
	Text string `json:"text"`

	// askedAt is when the worker asked.
	// +required
	AskedAt metav1.Time `json:"askedAt"`

	// answer is the sender's answer, once given.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Answer *string `json:"answer,omitempty"`

	// answeredAt is when the sender answered.
	// +optional
	AnsweredAt *metav1.Time `json:"answeredAt,omitempty"`

	// withdrawnAt is when the worker stopped waiting for an answer (its
	// bridge_ask call ended): the question is no longer open.
	// +optional
	WithdrawnAt *metav1.Time `json:"withdrawnAt,omitempty"`

	// carriedAs names the Delegation that types the question into its
	// member sender's pane, when nobody waited for it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CarriedAs string `json:"carriedAs,omitempty"`
}

// DelegationStatus is everything that happened to a Delegation.
type DelegationStatus struct {
	// phase is where the Delegation is: Pending, Queued, Delivered, Working,
	// Asking, or a terminal Replied, TurnDone, TimedOut, Failed, WorkerGone,
	// Cancelled. The API server shows a new Delegation as Queued.
	// +optional
	// +kubebuilder:default=Queued
	Phase DelegationPhase `json:"phase,omitempty"`

	// outcome is what a waiting sender gets, once settled.
	// +optional
	Outcome Outcome `json:"outcome,omitempty"`

	// conditions: Ready (True once settled with a reply or turn_done),
	// Delivered, Settled.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// reply is the worker's bridge_reply text.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Reply *string `json:"reply,omitempty"`

	// tail is the terminal's last lines when the turn ended without a reply.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Tail *string `json:"tail,omitempty"`

	// questions are the worker's bridge_ask calls, oldest first; the last
	// without an answer is open.
	// +optional
	// +listType=map
	// +listMapKey=turnID
	// +kubebuilder:validation:MaxItems=32
	Questions []Question `json:"questions,omitempty"`

	// deadline is when the Delegation times out.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`

	// queuedAt is when the controller queued it.
	// +optional
	QueuedAt *metav1.Time `json:"queuedAt,omitempty"`

	// deliveringAt records the intent to type it into the pane, written before
	// typing so that a controller restart never types it twice.
	// +optional
	DeliveringAt *metav1.Time `json:"deliveringAt,omitempty"`

	// deliveringSeq is the member's stateChangeSeq when delivery was intended;
	// a later seq proves a pickup.
	// +optional
	DeliveringSeq int64 `json:"deliveringSeq,omitempty"`

	// paneID is the pane the Delegation was typed into.
	// +optional
	PaneID string `json:"paneID,omitempty"`
	// terminalID is the terminal behind that pane. herdr reuses pane ids
	// after a restart; a terminal id names one terminal only.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	TerminalID string `json:"terminalID,omitempty"`

	// deliveredAt is when herdr confirmed the delivery.
	// +optional
	DeliveredAt *metav1.Time `json:"deliveredAt,omitempty"`

	// pickedUpAt is when the member was seen working on it.
	// +optional
	PickedUpAt *metav1.Time `json:"pickedUpAt,omitempty"`

	// repliedAt is when the reply arrived.
	// +optional
	RepliedAt *metav1.Time `json:"repliedAt,omitempty"`

	// settledAt is when the Delegation reached a terminal phase.
	// +optional
	SettledAt *metav1.Time `json:"settledAt,omitempty"`

	// detachedAt is when the sender stopped waiting (a cancelled or timed-out
	// call); a reply after that takes the detached path.
	// +optional
	DetachedAt *metav1.Time `json:"detachedAt,omitempty"`

	// cancelRequestedAt is when its sender withdrew it (bridge_cancel) while
	// it was in its member's hands: fleetd interrupts the member's turn and
	// settles it Cancelled.
	// +optional
	CancelRequestedAt *metav1.Time `json:"cancelRequestedAt,omitempty"`

	// replyDeliveredAs names the Delegation that carried the reply back into
	// the sender's pane (the detached path for member senders).
	// +optional
	ReplyDeliveredAs string `json:"replyDeliveredAs,omitempty"`

	// acknowledgedAt is when the outcome reached its sender: bridge_ack, a
	// re-attached bridge_send, or, for a member sender, when the Delegation
	// named in replyDeliveredAs was typed into its pane.
	// +optional
	AcknowledgedAt *metav1.Time `json:"acknowledgedAt,omitempty"`

	// usage is what the member's model calls used in the turn the message
	// started: from its prompt in the agent's transcript (Claude Code's
	// and Codex's) to the next prompt. It grows while the turn lasts and
	// may still grow after the message settles, since a reply can come
	// before the turn's last call.
	// +optional
	Usage *DelegationUsage `json:"usage,omitempty"`

	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dlg,categories=fleet
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="spec is immutable: a Delegation is a message already sent"
// +kubebuilder:printcolumn:name="From",type=string,JSONPath=`.spec.from.name`
// +kubebuilder:printcolumn:name="To",type=string,JSONPath=`.spec.to`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.status.outcome`
// +kubebuilder:printcolumn:name="Replied",type=date,JSONPath=`.status.repliedAt`,priority=1
// +kubebuilder:printcolumn:name="Content",type=string,JSONPath=`.spec.content`,priority=1
// +kubebuilder:printcolumn:name="Input",type=integer,JSONPath=`.status.usage.inputTokens`,priority=1
// +kubebuilder:printcolumn:name="Output",type=integer,JSONPath=`.status.usage.outputTokens`,priority=1
// +kubebuilder:printcolumn:name="Cost",type=string,JSONPath=`.status.usage.cost`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Delegation is one message to one member and everything that happens to it:
// queueing, delivery, questions, and the outcome its sender receives.
type Delegation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the message; immutable.
	// +required
	Spec DelegationSpec `json:"spec"`

	// status is what happened to it.
	// +optional
	// +kubebuilder:default={}
	Status DelegationStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// DelegationList is a list of Delegations.
type DelegationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Delegation `json:"items"`
}
