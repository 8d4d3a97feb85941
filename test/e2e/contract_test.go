package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/devenv"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/testutil"
)

// replica starts another fleetd serving only the gateway, with extra flags,
// and returns its MCP URL. Local mode only: in a cluster the deployment
// decides the flags.
func replica(t *testing.T, name string, extra ...string) string {
	t.Helper()
	url, _ := replicaProcess(t, name, extra...)
	return url
}

// replicaProcess is replica, with the process, for a test that stops it.
func replicaProcess(t *testing.T, name string, extra ...string) (string, *devenv.Process) {
	t.Helper()
	l, ok := w.mode.(*local)
	if !ok {
		t.Skip("starting a gateway replica with its own flags needs local mode")
	}
	url, p, err := l.startReplica(name, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(p.Log); err == nil {
				t.Logf("%s log (tail):\n%s", p.Name, tail(b, 20000))
			}
		}
		p.Stop(10 * time.Second)
	})
	return url, p
}

func sessionAt(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	s, err := mcpclient.Connect(t.Context(), url, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// teamMember applies a scripted-agent Member of team with role and waits
// until it is Ready.
func teamMember(t *testing.T, name, team, role string) {
	t.Helper()
	apply(t, fmt.Sprintf(`apiVersion: fleet.fleetd.dev/v1alpha1
kind: Member
metadata: {name: %s, namespace: %s}
spec:
  command: [scripted-agent, --received-log, %s]
  team: %s
  role: %s
`, name, ns, w.receivedLog(name), team, role))
	waitReady(t, name)
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, name, "--wait=false") })
}

// restCall calls the gateway's REST surface at the MCP URL's host.
func restCall(t *testing.T, mcpURL, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, strings.TrimSuffix(mcpURL, "/mcp")+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

func wantCodeOf(t *testing.T, what string, r mcpclient.Result, code string) {
	t.Helper()
	if !r.IsError || r.ErrorCode() != code {
		t.Errorf("%s: want error %s, got isError=%v %v %s", what, code, r.IsError, r.Fields, r.Text)
	}
}

func strs(v any) []string {
	var out []string
	list, _ := v.([]any)
	for _, x := range list {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// TestCapabilities: GET /v1/mcp/capabilities says what each gateway has on,
// and a namespace that is off answers feature_disabled.
func TestCapabilities(t *testing.T) {
	dumpOnFailure(t)
	other := replica(t, "capabilities", "--process-tools", "--team-tools=false", "--team-non-lead-can-add")

	status, caps := restCall(t, w.gatewayURL, http.MethodGet, "/v1/mcp/capabilities", w.token, "")
	if status != http.StatusOK {
		t.Fatalf("capabilities: %d %v", status, caps)
	}
	tools := strs(caps["tools"])
	if caps["processEnabled"] != false || caps["teamEnabled"] != true || !slices.Equal(strs(caps["supportedNamespaces"]), []string{"bridge", "team"}) ||
		slices.Contains(tools, "process_run") || !slices.Contains(tools, "bridge_cancel") || !slices.Contains(tools, "team_manage") {
		t.Errorf("the default gateway's capabilities: %v", caps)
	}
	if perms, _ := caps["teamManagePermissions"].(map[string]any); perms["nonLeadCanAdd"] != false || perms["nonLeadCanRemove"] != false {
		t.Errorf("teamManagePermissions: %v", caps["teamManagePermissions"])
	}
	var presets []string
	for _, p := range caps["teamModelPresets"].([]any) {
		presets = append(presets, fmt.Sprint(p.(map[string]any)["name"]))
	}
	if !slices.Contains(presets, "scripted") || !slices.Contains(presets, "claude-api") {
		t.Errorf("teamModelPresets %v lack the sample profiles", presets)
	}

	status, caps = restCall(t, other, http.MethodGet, "/v1/mcp/capabilities", w.token, "")
	tools = strs(caps["tools"])
	if status != http.StatusOK || caps["processEnabled"] != true || caps["teamEnabled"] != false ||
		!slices.Equal(strs(caps["supportedNamespaces"]), []string{"bridge", "process"}) || slices.Contains(tools, "team_status") || !slices.Contains(tools, "process_run") {
		t.Errorf("the replica's capabilities: %d %v", status, caps)
	}
	if perms, _ := caps["teamManagePermissions"].(map[string]any); perms["nonLeadCanAdd"] != true {
		t.Errorf("the replica's teamManagePermissions: %v", caps["teamManagePermissions"])
	}
	for _, ns := range caps["namespaces"].([]any) {
		n := ns.(map[string]any)
		if n["name"] == "team" && (n["enabled"] != false || len(strs(n["tools"])) != 0) {
			t.Errorf("a disabled namespace lists tools: %v", n)
		}
	}
	s := sessionAt(t, other, w.token)
	wantCodeOf(t, "team_status where team tools are off", call(t, s, "team_status", map[string]any{"team": "x"}), "feature_disabled")
	wantCodeOf(t, "process_run where process tools are off", call(t, session(t, w.token), "process_run", map[string]any{"command": []string{"true"}}), "feature_disabled")
}

// TestTeamPolicyAndStop: leads manage their team, other members only as
// the gateway's two switches allow; broadcasts skip their sender unless
// asked; stopping twice succeeds.
func TestTeamPolicyAndStop(t *testing.T) {
	dumpOnFailure(t)
	removers := replica(t, "team", "--team-non-lead-can-remove")
	teamMember(t, "e2e-lead", "e2e-crew", "lead")
	teamMember(t, "e2e-m1", "e2e-crew", "member")
	teamMember(t, "e2e-m2", "e2e-crew", "member")
	teamMember(t, "e2e-m3", "e2e-crew", "member")
	member(t, "e2e-loner")

	lead := session(t, memberToken(t, "e2e-lead"))
	r := call(t, lead, "team_message", map[string]any{"recipient": "broadcast", "content": "silent: standup"})
	if got := strs(r.Fields["recipients"]); !slices.Equal(got, []string{"e2e-m1", "e2e-m2", "e2e-m3"}) {
		t.Errorf("broadcast went to %v", got)
	}
	r = call(t, lead, "team_message", map[string]any{"recipient": "broadcast", "content": "silent: all hands", "includeSelf": true})
	if got := strs(r.Fields["recipients"]); !slices.Equal(got, []string{"e2e-lead", "e2e-m1", "e2e-m2", "e2e-m3"}) {
		t.Errorf("broadcast with includeSelf went to %v", got)
	}

	m1 := session(t, memberToken(t, "e2e-m1"))
	wantCodeOf(t, "a non-lead adding by default", call(t, m1, "team_manage", map[string]any{"action": "add"}), "forbidden")
	wantCodeOf(t, "a non-lead removing by default", call(t, m1, "team_manage", map[string]any{"action": "remove", "removeAgentIds": []string{"e2e-m2"}}), "forbidden")
	m1r := sessionAt(t, removers, memberToken(t, "e2e-m1"))
	wantCodeOf(t, "a non-lead adding where only removing is allowed", call(t, m1r, "team_manage", map[string]any{"action": "add"}), "forbidden")
	wantCodeOf(t, "a non-lead removing the lead", call(t, m1r, "team_manage", map[string]any{"action": "remove", "removeAgentIds": []string{"e2e-m2", "e2e-lead"}}), "forbidden")
	r = call(t, m1r, "team_manage", map[string]any{"action": "remove", "removeAgentIds": []string{"e2e-m2", "e2e-m3"}})
	if r.IsError || !slices.Equal(strs(r.Fields["removed"]), []string{"e2e-m2", "e2e-m3"}) {
		t.Fatalf("removing two members: %v", r.Fields)
	}
	testutil.Eventually(t, "e2e-m2 and e2e-m3 gone", func() (bool, string) {
		_, err2 := getMember("e2e-m2")
		_, err3 := getMember("e2e-m3")
		return err2 != nil && err3 != nil, fmt.Sprint(err2, err3)
	})

	loner := session(t, memberToken(t, "e2e-loner"))
	wantCodeOf(t, "team_status from a member in no team", call(t, loner, "team_status", nil), "not_team_member")
	wantCodeOf(t, "team_status of another team", call(t, m1, "team_status", map[string]any{"team": "other-crew"}), "not_team_member")

	// Stopping is idempotent, over MCP and REST.
	p := session(t, w.token)
	r = call(t, p, "bridge_stop", map[string]any{"paneId": "e2e-m2"})
	if r.IsError || r.Fields["alreadyGone"] != true {
		t.Errorf("stopping a member already removed: %v", r.Fields)
	}
	status, body := restCall(t, w.gatewayURL, http.MethodDelete, "/members/e2e-m3", w.token, "")
	if status != http.StatusOK || body["alreadyGone"] != true {
		t.Errorf("DELETE of a member already removed: %d %v", status, body)
	}
	r = call(t, p, "bridge_stop", map[string]any{"paneId": "e2e-m1"})
	if r.IsError || r.Fields["alreadyGone"] == true || r.Str("stopped") != "e2e-m1" {
		t.Errorf("stopping a live member: %v", r.Fields)
	}
}

// TestFailureCatalogue names the code of every refusal in the gateway
// contract's failure catalogue, through the real binary.
func TestFailureCatalogue(t *testing.T) {
	dumpOnFailure(t)
	procs := replica(t, "catalogue", "--process-tools")
	teamMember(t, "e2e-cat-lead", "e2e-cat", "lead")
	teamMember(t, "e2e-cat-m", "e2e-cat", "member")
	member(t, "e2e-cat-closed")
	closedToken := memberToken(t, "e2e-cat-closed")
	if out, err := w.kubectl("delete", "member", "-n", ns, "e2e-cat-closed"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// Who is calling.
	for name, token := range map[string]string{"caller missing": "", "bad token": "not-a-token", "caller closed": closedToken} {
		testutil.Eventually(t, name+" refused", func() (bool, string) {
			status, body := restCall(t, w.gatewayURL, http.MethodGet, "/agents", token, "")
			e, _ := body["error"].(map[string]any)
			return status == http.StatusUnauthorized && e["code"] == "unauthorized", fmt.Sprint(status, body)
		})
	}

	primary := sessionAt(t, procs, w.token)
	memberS := sessionAt(t, procs, memberToken(t, "e2e-cat-m"))
	run := call(t, primary, "process_run", map[string]any{"command": []string{"sleep", "30"}})
	if run.IsError {
		t.Fatalf("process_run: %v", run.Fields)
	}
	id := fmt.Sprint(run.Fields["process"].(map[string]any)["processId"])
	t.Cleanup(func() { call(t, primary, "process_kill", map[string]any{"processId": id}) })

	sent := call(t, primary, "bridge_send", map[string]any{"sessionId": "e2e-cat-lead", "content": "silent: a primary's message", "wait": false})
	wantOutcome(t, sent, "dispatched")

	cases := []struct {
		name string
		s    *mcp.ClientSession
		tool string
		args map[string]any
		code string
	}{
		{"unsupported namespace", primary, "widget_spin", nil, "invalid_argument"},
		{"ownership mismatch: another's process", memberS, "process_kill", map[string]any{"processId": id}, "forbidden"},
		{"ownership mismatch: another's message", memberS, "bridge_cancel", map[string]any{"dispatchId": sent.Str("dispatchId")}, "forbidden"},
		{"process tools disabled", session(t, w.token), "process_status", nil, "feature_disabled"},
		{"not a team member", memberS, "team_status", map[string]any{"team": "someone-elses"}, "not_team_member"},
		{"non-lead denied", memberS, "team_manage", map[string]any{"action": "add"}, "forbidden"},
		{"bad argument", primary, "bridge_read", map[string]any{"sessionId": "e2e-cat-m", "source": "everything"}, "invalid_argument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantCodeOf(t, tc.name, call(t, tc.s, tc.tool, tc.args), tc.code)
		})
	}
	// Team tools off: its own replica.
	noTeam := replica(t, "catalogue-noteam", "--team-tools=false")
	wantCodeOf(t, "team tools disabled", call(t, sessionAt(t, noTeam, w.token), "team_status", map[string]any{"team": "e2e-cat"}), "feature_disabled")
}

// TestListAndStatus: bridge_list is compact, filtered and paged;
// bridge_status shows one member in full and what is pending for the
// caller, as bridge_poll would, without acknowledging it.
func TestListAndStatus(t *testing.T) {
	dumpOnFailure(t)
	teamMember(t, "e2e-ls-a", "e2e-ls", "lead")
	teamMember(t, "e2e-ls-b", "e2e-ls", "member")
	member(t, "e2e-ls-c")
	s := session(t, w.token)

	r := call(t, s, "bridge_list", map[string]any{"namePrefix": "e2e-ls-", "limit": 2})
	if r.IsError || r.Fields["total"] != float64(3) || r.Str("continue") != "e2e-ls-b" || !slices.Equal(memberNames(r), []string{"e2e-ls-a", "e2e-ls-b"}) {
		t.Fatalf("first page: %v", r.Fields)
	}
	group := r.Fields["groups"].([]any)[0].(map[string]any)
	first := group["members"].([]any)[0].(map[string]any)
	if group["team"] != "e2e-ls" || first["name"] != "e2e-ls-a" || first["status"] != "idle" || first["paneId"] != nil {
		t.Errorf("a compact entry: %v in %v", first, group)
	}
	if !strings.Contains(r.Text, "team e2e-ls, profile -:\ne2e-ls-a idle 0\n") || strings.Contains(r.Text, "{") {
		t.Errorf("the text a model reads is not the compact lines: %q", r.Text)
	}
	r = call(t, s, "bridge_list", map[string]any{"namePrefix": "e2e-ls-", "limit": 2, "continue": "e2e-ls-b"})
	if names := memberNames(r); !slices.Equal(names, []string{"e2e-ls-c"}) || r.Str("continue") != "" {
		t.Errorf("second page: %v", r.Fields)
	}
	if names := memberNames(call(t, s, "bridge_list", map[string]any{"team": "e2e-ls"})); !slices.Equal(names, []string{"e2e-ls-a", "e2e-ls-b"}) {
		t.Errorf("by team: %v", names)
	}

	// One detached outcome and one open question for the caller.
	done := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-ls-a", "content": "reply: finished", "wait": false})
	asked := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-ls-c", "content": "ask: which way?", "wait": false})
	var st mcpclient.Result
	testutil.Eventually(t, "the outcome and the question in bridge_status", func() (bool, string) {
		st = call(t, s, "bridge_status", map[string]any{"sessionId": "e2e-ls-b"})
		return pollHas(st, done.Str("dispatchId"), "reply", "finished") && len(st.Fields["questions"].([]any)) > 0, fmt.Sprint(st.Fields)
	})
	q := st.Fields["questions"].([]any)[0].(map[string]any)
	if q["dispatchId"] != asked.Str("dispatchId") || q["text"] != "which way?" {
		t.Errorf("open question: %v", q)
	}
	if ms := st.Fields["members"].([]any); len(ms) != 1 || ms[0].(map[string]any)["paneId"] == "" {
		t.Errorf("the full record of e2e-ls-b: %v", ms)
	} else if left, present := ms[0].(map[string]any)["contextRemainingPercent"]; !present || left != nil {
		t.Errorf("a plain command reports no usage: contextRemainingPercent should be null, got %v (present %v)", left, present)
	}
	// bridge_status only looks: bridge_poll still has the outcome.
	if p := call(t, s, "bridge_poll", nil); !pollHas(p, done.Str("dispatchId"), "reply", "finished") {
		t.Errorf("bridge_status acknowledged the outcome: %v", p.Fields)
	}
	call(t, s, "bridge_ack", map[string]any{"dispatchId": done.Str("dispatchId")})
	call(t, s, "bridge_send", map[string]any{"turnId": q["turnId"], "content": "left", "wait": false})
}

// memberNames are the names of the members on a bridge_list page, sorted.
func memberNames(r mcpclient.Result) []string {
	var names []string
	groups, _ := r.Fields["groups"].([]any)
	for _, g := range groups {
		list, _ := g.(map[string]any)["members"].([]any)
		for _, m := range list {
			names = append(names, fmt.Sprint(m.(map[string]any)["name"]))
		}
	}
	slices.Sort(names)
	return names
}

// TestAutoSpawnByProfile: a message to a Profile with no live member starts
// one, named after the Profile, and the next message finds it; autoSpawn
// false never starts one.
func TestAutoSpawnByProfile(t *testing.T) {
	dumpOnFailure(t)
	s := session(t, w.token)
	apply(t, fmt.Sprintf(`apiVersion: fleet.fleetd.dev/v1alpha1
kind: Profile
metadata: {name: e2e-spawnable, namespace: %s}
spec: {command: [scripted-agent]}
`, ns))
	t.Cleanup(func() {
		_, _ = w.kubectl("delete", "member", "-n", ns, "e2e-spawnable", "--ignore-not-found", "--wait=false")
		_, _ = w.kubectl("delete", "profile", "-n", ns, "e2e-spawnable", "--ignore-not-found", "--wait=false")
	})
	// A profile with a live member sends to it.
	r := call(t, s, "bridge_send", map[string]any{"sessionId": "scripted", "content": "reply: from the sample member"})
	wantOutcome(t, r, "reply")
	if r.Str("member") != "worker-1" {
		t.Errorf("a message to the sample profile went to %q, not its one member worker-1", r.Str("member"))
	}

	r = call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-spawnable", "content": "reply: never", "autoSpawn": false})
	wantCodeOf(t, "autoSpawn false", r, "not_found")
	if _, err := getMember("e2e-spawnable"); err == nil {
		t.Error("autoSpawn false spawned a member")
	}

	r = call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-spawnable", "content": "reply: spawned for you"})
	wantOutcome(t, r, "reply")
	if r.Str("member") != "e2e-spawnable" || r.Str("text") != "spawned for you" {
		t.Errorf("the first message to the profile: %v", r.Fields)
	}
	m, err := getMember("e2e-spawnable")
	if err != nil || m.Spec.Profile != "e2e-spawnable" {
		t.Fatalf("the spawned member: %v %+v", err, m)
	}
	r = call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-spawnable", "content": "reply: the same one"})
	wantOutcome(t, r, "reply")
	if again, err := getMember("e2e-spawnable"); err != nil || again.UID != m.UID {
		t.Errorf("the second message spawned another member: %v", err)
	}
}

// TestDetachedQuestionReachesAMemberSender: a member sends detached; the
// worker's question is typed into the sender's pane with the turn id to
// answer by; the answer reaches the worker, whose reply is typed back.
func TestDetachedQuestionReachesAMemberSender(t *testing.T) {
	dumpOnFailure(t)
	senderLog := member(t, "e2e-q-sender")
	member(t, "e2e-q-worker")
	asSender := session(t, memberToken(t, "e2e-q-sender"))

	r := call(t, asSender, "bridge_send", map[string]any{"sessionId": "e2e-q-worker", "content": "ask: which colour?\nreply: painting it {answer}", "wait": false})
	wantOutcome(t, r, "dispatched")
	id := r.Str("dispatchId")
	turnID := id + ".q1"
	testutil.Eventually(t, "the question typed into the sender's pane", func() (bool, string) {
		got := received(t, senderLog)
		return slices.ContainsFunc(got, func(p string) bool {
			return strings.Contains(p, "which colour?") && strings.Contains(p, turnID) && strings.Contains(p, "bridge_send")
		}), fmt.Sprintf("%q", got)
	})
	d, err := getDelegation(id)
	if err != nil || len(d.Status.Questions) != 1 || d.Status.Questions[0].CarriedAs == "" {
		t.Fatalf("the question's carrier is not recorded: %v %+v", err, d.Status.Questions)
	}

	// The sender answers as its agent would, by the turn id it was shown.
	a := call(t, asSender, "bridge_send", map[string]any{"turnId": turnID, "content": "teal", "wait": false})
	if a.IsError {
		t.Fatalf("answering: %v", a.Fields)
	}
	testutil.Eventually(t, "the reply typed into the sender's pane", func() (bool, string) {
		got := received(t, senderLog)
		return slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, "painting it teal") }), fmt.Sprintf("%q", got)
	})
	// Carried replies quote what they answer (the scripted sender echoes
	// the question's carrier, and that echo comes back): only prompts that
	// are the question itself count.
	asked := 0
	for _, p := range received(t, senderLog) {
		if strings.HasPrefix(p, "Question from e2e-q-worker") && strings.Contains(p, "which colour?") {
			asked++
		}
	}
	if asked != 1 {
		t.Errorf("the question was typed %d times", asked)
	}
}

// TestGatewayRolloutEndsHeldCallsWithAResult: a replica holding a
// bridge_send gets SIGTERM, as in a rollout; the call ends with outcome
// interrupted and its dispatch id, and the same call on the other replica,
// by dispatch id alone, gets the reply. The message is typed once.
func TestGatewayRolloutEndsHeldCallsWithAResult(t *testing.T) {
	dumpOnFailure(t)
	log := member(t, "e2e-rollout")
	url, p := replicaProcess(t, "rollout")
	s := sessionAt(t, url, w.token)
	held := make(chan mcpclient.Result, 1)
	go func() {
		r, err := mcpclient.Call(t.Context(), s, "bridge_send", map[string]any{"sessionId": "e2e-rollout", "content": "sleep: 3\nreply: after the rollout"})
		if err != nil {
			r = mcpclient.Result{Text: err.Error()}
		}
		held <- r
	}()
	testutil.Eventually(t, "the member working", func() (bool, string) {
		m, err := getMember("e2e-rollout")
		if err != nil {
			return false, err.Error()
		}
		return m.Status.AgentStatus == "working", string(m.Status.AgentStatus)
	})
	p.Stop(10 * time.Second) // SIGTERM
	var r mcpclient.Result
	select {
	case r = <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the held call did not end when its gateway stopped")
	}
	wantOutcome(t, r, "interrupted")
	id := r.Str("dispatchId")
	if id == "" || !strings.Contains(r.Str("text"), id) {
		t.Fatalf("the interrupted call does not say how to carry on: %v", r.Fields)
	}
	again := call(t, session(t, w.token), "bridge_send", map[string]any{"dispatchId": id})
	wantOutcome(t, again, "reply")
	if again.Str("text") != "after the rollout" {
		t.Errorf("re-attached by dispatch id: %v", again.Fields)
	}
	if n := timesTyped(t, log, "after the rollout"); n != 1 {
		t.Errorf("the message was typed %d times", n)
	}
}

// TestProcessTools: on a gateway with --process-tools, a caller runs a
// command, follows it and reads its output; the process is its own.
func TestProcessTools(t *testing.T) {
	dumpOnFailure(t)
	url := replica(t, "processes", "--process-tools")
	s := sessionAt(t, url, w.token)
	r := call(t, s, "process_run", map[string]any{"command": []string{"sh", "-c", "echo from the process; exit 3"}})
	if r.IsError {
		t.Fatalf("process_run: %v", r.Fields)
	}
	id := fmt.Sprint(r.Fields["process"].(map[string]any)["processId"])
	testutil.Eventually(t, "the process exited 3", func() (bool, string) {
		st := call(t, s, "process_status", map[string]any{"processId": id})
		ps, _ := st.Fields["processes"].([]any)
		if len(ps) != 1 {
			return false, fmt.Sprint(st.Fields)
		}
		p := ps[0].(map[string]any)
		return p["state"] == "exited" && p["exitCode"] == float64(3), fmt.Sprint(p)
	})
	logs := call(t, s, "process_logs", map[string]any{"processId": id})
	if !strings.Contains(logs.Str("output"), "from the process") {
		t.Errorf("process_logs: %v", logs.Fields)
	}
	member(t, "e2e-proc-member")
	other := sessionAt(t, url, memberToken(t, "e2e-proc-member"))
	wantCodeOf(t, "another caller's process logs", call(t, other, "process_logs", map[string]any{"processId": id}), "forbidden")
	if st := call(t, other, "process_status", nil); len(st.Fields["processes"].([]any)) != 0 {
		t.Errorf("another caller sees processes: %v", st.Fields)
	}
}

// timesTyped counts the prompts in an agent's received log that contain s.
func timesTyped(t *testing.T, log, s string) int {
	t.Helper()
	n := 0
	for _, p := range received(t, log) {
		if strings.Contains(p, s) {
			n++
		}
	}
	return n
}

// TestMootQuestionIsNotTyped: a question for a busy member sender that is
// withdrawn (the worker's bridge_ask timed out) before the sender is free is
// never typed into its pane.
func TestMootQuestionIsNotTyped(t *testing.T) {
	dumpOnFailure(t)
	senderLog := member(t, "e2e-moot-sender")
	member(t, "e2e-moot-worker")
	busy := call(t, session(t, w.token), "bridge_send", map[string]any{"sessionId": "e2e-moot-sender", "content": "sleep: 6", "wait": false})
	waitDelegationPhase(t, busy.Str("dispatchId"), "Working")

	asSender := session(t, memberToken(t, "e2e-moot-sender"))
	r := call(t, asSender, "bridge_send", map[string]any{"sessionId": "e2e-moot-worker", "content": "sleep: 20", "wait": false})
	wantOutcome(t, r, "dispatched")
	id := r.Str("dispatchId")
	waitDelegationPhase(t, id, "Working")
	ask := call(t, session(t, memberToken(t, "e2e-moot-worker")), "bridge_ask", map[string]any{"content": "which way, moot?", "timeoutMs": 1500})
	if ask.IsError || ask.Str("outcome") != "timeout" {
		t.Fatalf("bridge_ask: %v", ask.Fields)
	}
	waitPhase(t, id+"-q1", fleetv1alpha1.DelegationCancelled)
	waitDelegationPhase(t, busy.Str("dispatchId"), "TurnDone")
	time.Sleep(2 * time.Second) // room for a wrong delivery to show up
	if n := timesTyped(t, senderLog, "which way, moot?"); n != 0 {
		t.Errorf("the withdrawn question was typed %d times", n)
	}
}
