package gateway

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// mcpStatus posts an MCP request with token and returns the HTTP status
// and the WWW-Authenticate header.
func mcpStatus(t testing.TB, h *harness, token string) (int, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
	req, err := http.NewRequest(http.MethodPost, h.url+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}

// TestAuthentication: identity comes from the bearer token alone, and
// every way of lacking one is refused before any tool runs.
func TestAuthentication(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	gone, goneToken := addMember(t, member("gone", ns).Obj())
	if err := env.Client.Delete(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	_, memberToken := addMember(t, member("w1", ns).Obj())
	wrongAudience := env.ServiceAccountToken(t, ns, "elsewhere", "kubernetes")
	unbound := env.ServiceAccountToken(t, ns, "unbound", fleetv1alpha1.GatewayAudience)
	bound := env.ServiceAccountToken(t, ns, "bound", fleetv1alpha1.GatewayAudience)
	env.AllowDelegations(t, ns, "bound")

	cases := map[string]struct {
		header     string
		wantStatus int
	}{
		"no token":                   {header: "", wantStatus: http.StatusUnauthorized},
		"not a bearer token":         {header: "Basic " + staticToken, wantStatus: http.StatusUnauthorized},
		"unknown token":              {header: "Bearer not-a-token", wantStatus: http.StatusUnauthorized},
		"unknown JWT":                {header: "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", wantStatus: http.StatusUnauthorized},
		"deleted member's token":     {header: "Bearer " + goneToken, wantStatus: http.StatusUnauthorized},
		"service account, wrong aud": {header: "Bearer " + wrongAudience, wantStatus: http.StatusUnauthorized},
		"service account, no RBAC":   {header: "Bearer " + unbound, wantStatus: http.StatusForbidden},
		"service account, bound":     {header: "Bearer " + bound, wantStatus: http.StatusOK},
		"member token":               {header: "Bearer " + memberToken, wantStatus: http.StatusOK},
		"static token":               {header: "Bearer " + staticToken, wantStatus: http.StatusOK},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var status int
			var challenge string
			// The gone member's deletion and the RoleBinding reach the
			// gateway's cache and RBAC asynchronously.
			testutil.Eventually(t, "", func() error {
				status, challenge = mcpStatus(t, h, tc.header)
				return errIf(status != tc.wantStatus, "status %d, want %d", status, tc.wantStatus)
			})
			if status == http.StatusUnauthorized && !strings.HasPrefix(challenge, "Bearer") {
				t.Errorf("401 without a Bearer challenge: %q", challenge)
			}
		})
	}

	// Whoever the token says, whoami agrees.
	whoami := map[string]WhoamiOutput{
		memberToken: {Kind: "Member", Name: "w1", Namespace: ns, Team: "", Role: "member"},
		staticToken: {Kind: "Static", Name: "primary", Namespace: ns, Primary: true},
		bound:       {Kind: "ServiceAccount", Name: "system:serviceaccount:" + ns + ":bound", Namespace: ns, Primary: true},
	}
	for token, want := range whoami {
		got := wantOK(t, callTool[WhoamiOutput](t, h.connect(t, token, nil), "bridge_whoami", nil))
		got.Member, got.Namespaces = nil, nil
		if err := diffErr(want, got); err != nil {
			t.Errorf("whoami for %s: %v", want.Name, err)
		}
	}
}

// TestMemberTokenOfEarlierMember: a Member recreated with the same name does
// not inherit the token of its predecessor.
func TestMemberTokenOfEarlierMember(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	old, token := addMember(t, member("w1", ns).Obj())
	testutil.Eventually(t, "", func() error {
		status, _ := mcpStatus(t, h, "Bearer "+token)
		return errIf(status != http.StatusOK, "status %d with a fresh member token", status)
	})
	if err := env.Client.Delete(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	// Recreated, but the old token Secret (labelled with the old UID) is
	// still there.
	testutil.Eventually(t, "", func() error { return env.Client.Create(context.Background(), member("w1", ns).Obj()) })
	testutil.Eventually(t, "", func() error {
		status, _ := mcpStatus(t, h, "Bearer "+token)
		return errIf(status != http.StatusUnauthorized, "status %d with the earlier member's token", status)
	})
}

// TestForgedTokenSecretAuthenticatesNobody reproduces an attack: a Secret
// carrying a member's labels, made by anyone allowed to create Secrets,
// once made any value in it authenticate as that member. The gateway now
// knows a member only by the hash in its status, which only fleetd writes.
func TestForgedTokenSecretAuthenticatesNobody(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	w1, token := addMember(t, member("w1", ns).Obj())
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "forged", Namespace: ns,
			Labels: map[string]string{fleetv1alpha1.LabelMember: "w1", fleetv1alpha1.LabelMemberUID: string(w1.UID)},
		},
		Data: map[string][]byte{fleetv1alpha1.TokenSecretKey: []byte("forged-value")},
	})
	testutil.Eventually(t, "", func() error {
		status, _ := mcpStatus(t, h, "Bearer "+token)
		return errIf(status != http.StatusOK, "status %d with w1's own token", status)
	})
	if status, _ := mcpStatus(t, h, "Bearer forged-value"); status != http.StatusUnauthorized {
		t.Errorf("a forged token Secret authenticated (status %d), want 401", status)
	}
}

// TestGatewayNeverOutdoesItsCallersRBAC reproduces a confused deputy: a
// service account allowed only to create delegations, which kubectl would
// refuse to create or delete Members, did both through the gateway. Every
// action of a service account is now what RBAC allows it.
func TestGatewayNeverOutdoesItsCallersRBAC(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{Features: map[ToolNamespace]bool{ToolNamespaceProcess: true}})
	create(t, testutil.MakeProfile("sub", ns).Command("true").Default().Obj())
	addMember(t, member("w1", ns).Team("core", fleetv1alpha1.RoleMember).Obj())
	token := env.ServiceAccountToken(t, ns, "narrow", fleetv1alpha1.GatewayAudience)
	env.AllowDelegations(t, ns, "narrow")
	cs := h.connect(t, token, nil)
	testutil.Eventually(t, "", func() error {
		return errIf(callTool[ListOutput](t, cs, "bridge_whoami", nil).err != nil, "not allowed in yet")
	})

	refused := map[string]struct {
		tool string
		args map[string]any
	}{
		"stop a member":           {tool: "bridge_stop", args: map[string]any{"paneId": "w1"}},
		"spawn a member":          {tool: "bridge_spawn", args: map[string]any{"profile": "sub"}},
		"list members":            {tool: "bridge_list"},
		"member status":           {tool: "bridge_status"},
		"team status":             {tool: "team_status", args: map[string]any{"team": "core"}},
		"add to a team":           {tool: "team_manage", args: map[string]any{"team": "core", "action": "add", "profile": "sub"}},
		"remove from a team":      {tool: "team_manage", args: map[string]any{"team": "core", "action": "remove", "name": "w1"}},
		"run a process":           {tool: "process_run", args: map[string]any{"command": []string{"true"}}},
		"read a process's status": {tool: "process_status", args: map[string]any{"processId": "p1"}},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			got := callTool[ListOutput](t, cs, tc.tool, tc.args)
			wantCode(t, got, toolerr.Forbidden)
			if !strings.Contains(got.err.Message, "may not") {
				t.Errorf("message %q does not say what RBAC refused", got.err.Message)
			}
		})
	}
	for method, path := range map[string]string{http.MethodPost: "/members", http.MethodDelete: "/members/w1", http.MethodGet: "/agents"} {
		req, _ := http.NewRequest(method, h.url+path, strings.NewReader(`{"profile":"sub"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s: status %d, want 403", method, path, resp.StatusCode)
		}
	}
	var m fleetv1alpha1.Member
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "w1"}, &m); err != nil || m.DeletionTimestamp != nil {
		t.Errorf("w1 was stopped: %v %v", err, m.DeletionTimestamp)
	}

	// Granted by RBAC, the same calls go through.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "members-narrow", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{fleetv1alpha1.GroupVersion.Group}, Resources: []string{"members"}, Verbs: []string{"get", "create", "delete"}}},
	}
	create(t, role, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "members-narrow", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "narrow", Namespace: ns}},
	})
	// Each verb's refusal is remembered for a few seconds of its own (the
	// negative review TTL), so each granted call is retried until its own
	// refusal expires.
	testutil.Eventually(t, "", func() error {
		got := callTool[ListOutput](t, cs, "bridge_list", nil)
		return errIf(got.err != nil, "bridge_list still refused: %v", got.err)
	})
	testutil.Eventually(t, "", func() error {
		got := callTool[StopOutput](t, cs, "bridge_stop", map[string]any{"paneId": "w1"})
		return errIf(got.err != nil, "bridge_stop still refused: %v", got.err)
	})
}

// TestSlowBodyWithoutATokenIsCut reproduces a slowloris an attack run kept
// open for over 50s: a request with no valid token that sends its body
// slowly. The request is refused at once; its connection ends when the
// body's deadline passes.
func TestSlowBodyWithoutATokenIsCut(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{BodyReadTimeout: 500 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}
	// The client keeps the connection open and sends nothing more; within a
	// bound far above the deadline, the server must have let it go.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(conn)
	status, err := r.ReadString('\n')
	if err != nil || !strings.Contains(status, "401") {
		t.Fatalf("first line %q, %v; want a 401", status, err)
	}
	for {
		if _, err := r.ReadByte(); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the connection of a slow, unauthenticated body was kept open")
			}
			return
		}
	}
}

// TestHeldCallOutlivesTheBodyDeadline: a held bridge_send takes longer
// than the body's deadline, which is lifted once the body is read.
func TestHeldCallOutlivesTheBodyDeadline(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{BodyReadTimeout: 300 * time.Millisecond})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	worker := h.connect(t, workerToken, nil)
	sent := async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"content": "take your time", "timeoutMs": 60000})
	d := waitDelegation(t, ns, "w1", nil)
	time.Sleep(time.Second) // well past the body deadline
	deliver(t, ns, d.Name)
	wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "done"}))
	if got := wantOK(t, receive(t, sent)); got.Outcome != "reply" || got.Text != "done" {
		t.Errorf("bridge_send = %+v, want the reply", got)
	}
}
