package gateway

// Tool descriptions. A model reads them once and must use the tool right the
// first time: what blocks, for how long, and what each outcome means.
const (
	descSend = `Send a message to a worker (a fleet member: an AI agent in a terminal pane) and wait, in this one call, for what comes back.
The call blocks until the first of:
- the worker calls bridge_reply -> {outcome:"reply", text, dispatchId}. Done.
- the worker asks you a question with bridge_ask -> {outcome:"question", text, turnId, dispatchId}. Answer by calling bridge_send again with {content:<your answer>, turnId}; that call waits again on the same message.
- the worker ends its turn without replying -> {outcome:"turn_done", text:<last lines of its terminal>}.
- the deadline passes (timeoutMs, default 600000 = 10 minutes, capped by the gateway) -> {outcome:"timeout", dispatchId}. The message stays queued or in progress; a late reply appears in bridge_poll.
- this gateway replica shuts down (a restart or rollout) -> {outcome:"interrupted", dispatchId}: the message carries on; call bridge_send {dispatchId} to wait for it again.
- the message is withdrawn with bridge_cancel -> {outcome:"cancelled", dispatchId}.
bridge_send {dispatchId} (no content) re-attaches to a message you sent and waits for its outcome again, e.g. after a timeout or an interrupted call.
With wait:false it returns at once with {outcome:"dispatched", dispatchId}; the outcome arrives later in bridge_poll (or typed into your pane if you are a member).
sessionId picks the worker by member name, agent session id, terminal id or pane id, or by a profile's name (bridge_profiles): that profile's one live member, or a new member spawned from it (named after the profile) when it has none. Omit sessionId when exactly one other member exists; when none exists one is spawned from the default profile; when several could take it the call fails with invalid_argument listing them. autoSpawn:false never spawns: the call fails with not_found instead.
idempotencyKey (recommended for long tasks): a repeated call with the same key never sends twice while fleetd keeps the first message (settled messages are kept a day by default); it waits on the first message again or returns its outcome, which is how to re-attach after a dropped connection or a gateway restart.
Errors (isError with {error:{code,message}}): worker_gone (member or pane went away), delivery_failed, cancelled (the message was deleted), not_found, invalid_argument, subscription_boundary, conflict (idempotencyKey reused for different content, or a turnId answered differently).
While waiting, a progress notification is sent periodically (every 15 s by default) if the request carries a progress token.`

	descReply = `Reply to the message you are working on; for fleet members only. This settles the delegation in flight to you and hands text to the sender's waiting bridge_send, so call it once, at the end, with the complete answer the sender needs. You never name the sender or the message: the gateway knows which delegation you are handling.
A reply after the sender's deadline, or after your turn was taken to have ended without one, is still recorded and reaches the sender later (late:true).
Returns at once with {dispatchId, late}. Error not_found: nothing is in flight to you.`

	descAsk = `Ask the sender of the message you are working on a clarifying question, and wait for the answer; for fleet members only. You stay in the same turn.
Blocks until the sender answers -> {answer, turnId}, or until timeoutMs passes (default 600000 = 10 minutes) -> {outcome:"timeout", turnId}: then carry on with your best judgement and say so in your bridge_reply.
Error not_found: nothing is in flight to you. Error cancelled: the message settled before anyone answered.`

	descRead = `Read a worker's terminal: what it shows now, or its latest output, as plain text (escape sequences removed, at most 64 KiB, its end kept). For primaries: use it to see how a worker you sent a message with wait:false is getting on, without disturbing it.
sessionId picks the member (name, agent session id, terminal id or pane id). source: visible (the screen now), recent (default: the latest lines as displayed), recent_unwrapped (the latest output as logical lines) or detection (the text fleetd's screen rules look at, and in detection what they make of it: the state they concluded, the rule that decided, every rule that matched, the terminal title, and herdr's status now; use it to see why a member shows blocked or idle). lines: how many lines of recent output (default 80, at most 1000).
Returns {member, paneId, source, text, truncated, detection}. Errors: not_found (no such member), worker_gone (it has no pane), forbidden.`

	descCancel = `Withdraw a message you sent (or, with the right to, one someone else sent in your namespace). A message still queued is withdrawn at once; one the worker is working on has the worker's turn interrupted (its interrupt key, as a person would press it), then settles. The held bridge_send on it returns {outcome:"cancelled"}.
Waits until the message settles, then returns {dispatchId, outcome}: "cancelled", or how it settled first when something beat the cancel (a reply that came in the meantime is kept: outcome "reply" with its text). "cancelling" means the interrupt is under way; the outcome appears in bridge_poll.
Errors: not_found (no such message), forbidden (not yours, and you may not cancel others' messages).`

	descPoll = `Collect what nobody waited for, without blocking: outcomes of messages you sent with wait:false, of bridge_send calls that timed out or were cancelled on your side, and late replies. Each entry has dispatchId, member, outcome (reply, turn_done, timeout, or an error code) and text. Also lists open questions workers asked you: answer with bridge_send {content, turnId}.
Entries stay until you acknowledge them with bridge_ack.`

	descAck = `Acknowledge outcomes shown by bridge_poll so they are not shown again. Pass dispatchId for one, ids for several, or neither to acknowledge everything bridge_poll shows now. Only settled messages you sent can be acknowledged. Returns at once with the acknowledged ids.`

	descStatus = `Show, without blocking, one member in full and everything pending for you. With sessionId (name, agent session id, terminal id or pane id): that member's record (agent status: idle, working, blocked = a dialog is on screen with its text in waiting, done; phase; pane, terminal and session ids; queue depth; the message in flight). Without it: you, if you are a member (bridge_list shows the whole fleet).
Always: pending (your messages still in progress, with any open question), outcomes (settled messages of yours that nobody waited for: the same entries bridge_poll shows) and questions (open questions workers asked you; answer with bridge_send {content, turnId}). bridge_status only looks: acknowledge outcomes with bridge_ack so bridge_poll and bridge_status stop showing them.`

	descSpawn = `Start a new worker from a profile (bridge_profiles lists them; omit profile to use the namespace's default). Returns at once with the new member; its pane starts in the background, and messages sent to it with bridge_send (sessionId = its name) queue until its agent is ready. A member may only spawn profiles with its own billing mode (subscription or api); crossing it fails with subscription_boundary.`

	descList = `List members compactly, by team and profile, without blocking: name, status (a ready member's agent status: idle, working, blocked, done, unknown; else its phase: pending, starting, restarting, failed, terminating), queue depth, team, profile, and for a blocked member the dialog it waits on. "self"/(you) marks you. Filters: status, team, profile, namePrefix. Pages: limit (default 100, at most 500) and continue (from the previous page); total counts every match. bridge_status {sessionId} shows one member in full.`

	descStop = `Stop a worker: delete the member and close its pane. paneId addresses it by pane id, member name, terminal id or agent session id. Allowed for the member that spawned it, the lead of its team, and primaries (non-member callers). Messages still queued for it settle as worker_gone. Returns at once with {stopped}. Stopping is idempotent: a member that is already gone (or already stopping) gives {stopped, alreadyGone:true}, not an error, so a retried stop is safe.`

	descProfiles = `List the profiles workers can be spawned from: name, description, agent or command, model, effort, billing (subscription or api) and which one is the default. Environment values are never shown.`

	descWhoami = `Say who the gateway takes you for: principal kind (Member, ServiceAccount or Static), name, namespace, and for members their team and role; plus which tool namespaces are switched on. Identity comes only from your token.`

	descTeamStatus = `Show your team: every member with its role, status, pane ids, queue depth, message in flight, and contextRemainingPercent (how much of its context window its session had left at its latest model call, from Claude Code's or Codex's transcript; null for agents that keep none). Members see their own team; primaries pass team. Returns at once. Errors: not_team_member (you are not in that team).`

	descTeamMessage = `Send a message to one team member (recipient = its name, or any of its ids) or to every other member of your team (recipient = "broadcast"; includeSelf:true to send it to yourself too). Does not wait: returns at once with the dispatch ids; replies arrive through bridge_poll, or typed into your pane if you are a member. Primaries pass team.
Images (at most 4 PNG, JPEG, GIF or WebP, 1 MiB together) go with the message and reach the recipient's model as images: a member names files in its own working directory with imagePaths (relative to it, or absolute within it); anyone passes bytes with images [{data: base64, name}]. Claude Code and Codex members take images; a plain command does not.
Errors: unsupported_provider_images (a recipient cannot take images; nothing was sent), image_too_large, forbidden (a path outside your working directory), not_found (no such file or member), invalid_argument (not an image, bad base64, imagePaths from a primary), not_team_member.`

	descTeamManage = `Add a member to your team from a profile (action "add", profile optional: the default profile; name optional; message optional: its first message, typed in once its agent is ready, with imagePaths or images as team_message takes them, and its dispatchId returned) or remove members (action "remove", removeAgentIds: their names or ids; name for just one). A remove checks every member first and removes all or none. Leads and primaries may always do this; other members only where the gateway's team policy allows (GET /v1/mcp/capabilities: teamManagePermissions nonLeadCanAdd, nonLeadCanRemove), and never remove the lead; primaries pass team. Adding obeys the subscription boundary like bridge_spawn. Returns at once with {action, member, removed}.
Errors: not_team_member (you are not in that team), forbidden (the policy does not let you), not_found (no such member in the team), unsupported_provider_images (images for a profile whose agent cannot take them; nobody was added), image_too_large.`

	descProcessRun = `Run a command on the gateway's host, without a shell: command is the argv (["make","test"]). Returns at once with processId; follow it with process_status and process_logs, stop it with process_kill. The process belongs to you: other callers cannot see it. Its environment is minimal (PATH, HOME, LANG), never the gateway's credentials.`

	descProcessStatus = `Show your processes (or the one processId names): command, state (running or exited), exit code, start and end time. Returns at once.`

	descProcessLogs = `Return the recent output (stdout and stderr interleaved) of one of your processes: the last tailBytes bytes (default and maximum: the whole kept buffer). truncated says older output was dropped. Returns at once.`

	descProcessKill = `Stop one of your processes (SIGTERM to its process group, SIGKILL after a short grace). Returns its state.`
)
