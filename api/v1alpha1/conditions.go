package v1alpha1

// Condition types.
const (
	// ConditionReady is the rollup: a Member whose pane and agent are ready, a
	// Delegation that settled with a reply or turn_done, a usable Profile.
	ConditionReady = "Ready"
	// ConditionPaneReady says the Member's herdr pane exists.
	ConditionPaneReady = "PaneReady"
	// ConditionAgentReady says the Member's agent was started and reports a status.
	ConditionAgentReady = "AgentReady"
	// ConditionAgentHooks says whether fleetd's hooks decide the agent's
	// status in herdr: False when another source owns the pane (herdr then
	// drops fleetd's reports).
	ConditionAgentHooks = "AgentHooks"
	// ConditionHerdrReachable says the controller can talk to herdr: the
	// shared pane server, or a pod member's own pane host.
	ConditionHerdrReachable = "HerdrReachable"
	// ConditionPodScheduled says a pod member's Pod has a node: False with
	// the scheduler's message when none fits.
	ConditionPodScheduled = "PodScheduled"
	// ConditionIsolated says whether other members can act as this one:
	// True in a Pod of its own, or as a Unix user of its own on the shared
	// pane server; False where members share one user (the real herdr, or
	// a pane server that may not switch users).
	ConditionIsolated = "Isolated"
	// ConditionSuspended says whether a Member that may be suspended (spec
	// idle or suspend, its own or its Profile's) is: True with reason Idle
	// or SuspendRequested while its Pod is gone; False with Active while it
	// runs, Resuming, Resumed or SessionNotResumed after a resume, and
	// CannotSuspend when it may not be.
	ConditionSuspended = "Suspended"
	// ConditionWarmPool says whether a Profile's warm pool is full: True
	// with reason PoolFull when warmPool.size Pods are free, False with
	// PoolFilling while some start, and PoolUnavailable when none can be.
	ConditionWarmPool = "WarmPool"
	// ConditionDelivered says whether a Delegation was typed into its pane.
	ConditionDelivered = "Delivered"
	// ConditionSettled says a Delegation reached a terminal phase.
	ConditionSettled = "Settled"
)

// Condition reasons. They double as event reasons, so they are CamelCase.
const (
	// ReasonReady: everything the condition checks is in place.
	ReasonReady = "Ready"
	// ReasonOwnPod: the Member runs in a Pod of its own.
	ReasonOwnPod = "OwnPod"
	// ReasonOwnUser: the Member's processes run as a Unix user of their own.
	ReasonOwnUser = "OwnUser"
	// ReasonSharedUser: the Member's processes run as the pane server's
	// user, with every other member's.
	ReasonSharedUser = "SharedUser"
	// ReasonUnschedulable: no node fits the Member's Pod; the message is
	// the scheduler's.
	ReasonUnschedulable = "Unschedulable"
	// ReasonPodScheduled: the Member's Pod has a node.
	ReasonPodScheduled = "PodScheduled"
	// ReasonPoolFull, ReasonPoolFilling and ReasonPoolUnavailable say how
	// a Profile's warm pool stands (ConditionWarmPool).
	ReasonPoolFull        = "PoolFull"
	ReasonPoolFilling     = "PoolFilling"
	ReasonPoolUnavailable = "PoolUnavailable"
	// ReasonPodClaimed: the Member took a warm Pod from its Profile's pool.
	ReasonPodClaimed = "PodClaimed"
	// ReasonPodStarting: the Member's Pod has not started its pane host yet.
	ReasonPodStarting = "PodStarting"
	// ReasonPodLost: the Member's Pod ended (crashed, was OOMKilled or
	// deleted, or its node was lost); it is recreated.
	ReasonPodLost = "PodLost"
	// ReasonPodForbidden: the Member's own spec.pod asks for more than a
	// Member may (Pod Security restricted, the namespace's default service
	// account, fleetd's or its Profile's image, no tolerations or runtime
	// class): fleetd creates no Pod for it. Only a Profile opens more.
	ReasonPodForbidden = "PodForbidden"
	// ReasonWorkspaceClaimTaken: the Member's workspace claim exists and
	// was made for another Member of the same name (its member-uid label
	// names another UID, or it predates this Member): a kept claim holds
	// what the old agent left, so fleetd makes no Pod with it. Delete the
	// claim for a fresh one, or hand it over by labelling it with this
	// Member's UID.
	ReasonWorkspaceClaimTaken = "WorkspaceClaimTaken"
	// ReasonIdle: the Member was suspended for being idle past
	// spec.idle.suspendAfter.
	ReasonIdle = "Idle"
	// ReasonSuspendRequested: the Member was suspended because spec.suspend
	// is true.
	ReasonSuspendRequested = "SuspendRequested"
	// ReasonActive: the Member runs, and is suspended when idle long
	// enough or asked.
	ReasonActive = "Active"
	// ReasonResuming: a suspended Member is being brought back, its agent
	// started on its saved session.
	ReasonResuming = "Resuming"
	// ReasonResumed: a suspended Member's agent is ready on its saved
	// session.
	ReasonResumed = "Resumed"
	// ReasonSessionNotResumed: a suspended Member's saved session could not
	// be resumed (missing, corrupt, written by another version of the
	// agent: the agent exited), so its agent started a fresh session.
	ReasonSessionNotResumed = "SessionNotResumed"
	// ReasonCannotSuspend: the Member asks to be suspended and cannot be:
	// it runs on the shared pane server, or its workspace is no claim of
	// its own and would be lost with its Pod.
	ReasonCannotSuspend = "CannotSuspend"
	// ReasonProfileNotFound: the Member names a Profile that does not exist.
	ReasonProfileNotFound = "ProfileNotFound"
	// ReasonSecretNotAllowed: an env value refers to a Secret that does not
	// allow it: fleetd's own, or one not labelled
	// fleet.fleetd.dev/allow-member-env=true.
	ReasonSecretNotAllowed = "SecretNotAllowed"
	// ReasonSecretNotFound: an env value refers to a missing Secret or key.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonSubscriptionBoundary: the effective environment would carry
	// ANTHROPIC_BASE_URL or a credential from outside the Profile or Member spec,
	// or would cross from subscription to API billing.
	ReasonSubscriptionBoundary = "SubscriptionBoundary"
	// ReasonPaneCreated: the pane was created and its agent started.
	ReasonPaneCreated = "PaneCreated"
	// ReasonPaneAdopted: an existing pane from an earlier controller run was adopted.
	ReasonPaneAdopted = "PaneAdopted"
	// ReasonPaneLost: the pane was closed or its process exited.
	ReasonPaneLost = "PaneLost"
	// ReasonPaneRecreated: a lost pane was recreated.
	ReasonPaneRecreated = "PaneRecreated"
	// ReasonBackoff: the controller waits before recreating the pane.
	ReasonBackoff = "Backoff"
	// ReasonAgentStarting: the agent was started and has not reported yet.
	ReasonAgentStarting = "AgentStarting"
	// ReasonBlockedAtStart: the agent shows a dialog before it was ever
	// ready; the message holds the dialog's text.
	ReasonBlockedAtStart = "BlockedAtStart"
	// ReasonHooksReporting: fleetd's hooks report the agent's status.
	ReasonHooksReporting = "HooksReporting"
	// ReasonAwaitingHooks: no hook of the agent has run yet.
	ReasonAwaitingHooks = "AwaitingHooks"
	// ReasonOtherStatusSource: another source owns the pane's status in
	// herdr, which drops fleetd's reports.
	ReasonOtherStatusSource = "OtherStatusSource"
	// ReasonAgentStartFailed: herdr refused to start the agent.
	ReasonAgentStartFailed = "AgentStartFailed"
	// ReasonHerdrUnreachable: the herdr socket does not answer.
	ReasonHerdrUnreachable = "HerdrUnreachable"
	// ReasonHerdrReachable: the herdr socket answers.
	ReasonHerdrReachable = "HerdrReachable"
	// ReasonTokenSecretReplaced: a member's token Secret holds a token
	// fleetd did not write; it authenticates nobody.
	ReasonTokenSecretReplaced = "TokenSecretReplaced"
	// ReasonCleanupTimedOut: deletion gave up closing the pane after a bounded wait.
	ReasonCleanupTimedOut = "CleanupTimedOut"
	// ReasonDeleting: the object is being deleted.
	ReasonDeleting = "Deleting"

	// ReasonQueued: the Delegation waits for its member.
	ReasonQueued = "Queued"
	// ReasonDelivered: the Delegation was typed into the pane.
	ReasonDelivered = "Delivered"
	// ReasonDeliveryRefused: herdr refused to type the Delegation.
	ReasonDeliveryRefused = "DeliveryRefused"
	// ReasonDeliveryUnconfirmed: a controller restart interrupted the delivery
	// and no pickup proves it was typed; it is not typed again.
	ReasonDeliveryUnconfirmed = "DeliveryUnconfirmed"
	// ReasonLoopGuard: a chain of messages (spec.hops) longer than allowed.
	ReasonLoopGuard = "LoopGuard"
	// ReasonReplied, ReasonTurnDone, ReasonTimedOut, ReasonWorkerGone and
	// ReasonCancelled name how a Delegation settled.
	ReasonReplied    = "Replied"
	ReasonTurnDone   = "TurnDone"
	ReasonTimedOut   = "TimedOut"
	ReasonWorkerGone = "WorkerGone"
	ReasonCancelled  = "Cancelled"
	// ReasonInProgress: the Delegation has not settled.
	ReasonInProgress = "InProgress"
)

// Label and annotation keys, and other well-known names.
const (
	// LabelMember names the Member a Secret belongs to or a Delegation is sent to.
	LabelMember = "fleet.fleetd.dev/member"
	// LabelPool names the Profile a warm Pod (and its pane host Secret)
	// was started for. An unclaimed warm Pod carries LabelMember with an
	// empty value, so that fleetd's caches, which hold only objects with
	// LabelMember, see it; a claim sets it to the Member's name.
	LabelPool = "fleet.fleetd.dev/pool"
	// LabelMemberUID records the UID of the Member a token Secret was made
	// for, so a recreated Member with the same name never inherits a token.
	LabelMemberUID = "fleet.fleetd.dev/member-uid"
	// LabelAllowMemberEnv, set to "true" on a Secret, lets Members and
	// Profiles name it in env (secretKeyRef): creating a Member must not
	// let a user read every Secret of the namespace through fleetd. fleetd's
	// own Secrets (member tokens, pane host credentials, static tokens, the
	// pane host CA) are never allowed, whatever their labels say.
	LabelAllowMemberEnv = "fleet.fleetd.dev/allow-member-env"
	// LabelInternal marks a Secret fleetd made for itself.
	LabelInternal = "fleet.fleetd.dev/internal"
	// LabelTeam copies a Member's team onto its Delegations for selection.
	LabelTeam = "fleet.fleetd.dev/team"
	// LabelSender names the sender of a Delegation (a member name or a
	// principal hash), for bridge_poll.
	LabelSender = "fleet.fleetd.dev/sender"
	// LabelShard is the shard (a decimal number) of the Member an object
	// belongs to or a Delegation is sent to: a hash of the Member's
	// namespace and name, so it never changes while the shard count does
	// not. A warm Pod carries its Profile's until a Member claims it. Each
	// fleetd replica caches and writes only the shards it holds Leases for.
	LabelShard = "fleet.fleetd.dev/shard"
	// LabelLease marks fleetd's Leases: "shard" for a shard's (its holder
	// is the replica that owns the shard), "replica" for a replica's own,
	// which it renews while it lives.
	LabelLease = "fleet.fleetd.dev/lease"
	// LabelClosed, set to "true" by the controller of a Delegation's shard,
	// says that the Delegation needs nothing more from anyone but retention
	// (delegation.Closed): settled, its outcome claimed or owed to nobody,
	// no reply to carry, no late reply possible. The gateway's cache leaves
	// closed Delegations out; it reads them from the API server when asked
	// for one. The controller removes the label from a Delegation that is
	// not closed, whoever set it.
	LabelClosed = "fleet.fleetd.dev/closed"
	// LabelStaticToken marks a Secret whose keys are static gateway tokens.
	LabelStaticToken = "fleet.fleetd.dev/static-token"
	// AnnotationSequence orders Delegations created within the same second:
	// the gateway sets it to the creation time with nanoseconds (RFC 3339).
	AnnotationSequence = "fleet.fleetd.dev/sequence"
	// AnnotationCancel set to "true" withdraws a Delegation, as bridge_cancel
	// does: a queued one settles Cancelled, one in flight has its member's
	// turn interrupted first. It is how a kubectl user cancels.
	AnnotationCancel = "fleet.fleetd.dev/cancel"
	// AnnotationBytes records, on a closed Delegation, the bytes of its
	// message (content and images): what the sender's bound on the bytes
	// it keeps counts, read without the message itself.
	AnnotationBytes = "fleet.fleetd.dev/bytes"
	// AnnotationSpawnedBy records who spawned a Member through the gateway.
	AnnotationSpawnedBy = "fleet.fleetd.dev/spawned-by"
	// AnnotationSentWhile names, on a Delegation a member sent, the one it
	// was working on then: the link its hop count (spec.hops) follows.
	AnnotationSentWhile = "fleet.fleetd.dev/sent-while"
	// AnnotationTraceparent carries, on a Delegation, the W3C traceparent
	// of the call that sent it (the gateway sets it when tracing is on; a
	// kubectl user may set it): the controllers' and the gateway's spans of
	// the message join that trace.
	AnnotationTraceparent = "fleet.fleetd.dev/traceparent"
	// MemberFinalizer lets the controller close a Member's pane before it goes.
	MemberFinalizer = "fleet.fleetd.dev/pane"
	// TokenSecretKey is the key of the member token in its Secret.
	TokenSecretKey = "token"
	// GatewayAudience is the audience service-account tokens must carry.
	GatewayAudience = "fleetd"
)
