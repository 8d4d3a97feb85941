package gateway

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
)

// fakeGateway is a Gateway over a fake client, served by httptest: no API
// server, so that fuzzing runs anywhere and fast. The process namespace
// stays off: fuzzed arguments must never run commands.
func fakeGateway(t testing.TB) (*Gateway, *httptest.Server) {
	t.Helper()
	const ns = "fuzz"
	lead := testutil.MakeMember("lead", ns).Profile("sub").Team("core", fleetv1alpha1.RoleLead).Obj()
	lead.UID = "uid-lead"
	lead.Status.TokenHash, lead.Status.TokenSecretName = fleetv1alpha1.TokenHash("lead-token"), "lead-fleetd-token"
	w1 := testutil.MakeMember("w1", ns).Profile("sub").Team("core", fleetv1alpha1.RoleMember).Obj()
	w1.UID = "uid-w1"
	objs := []client.Object{
		lead, w1,
		testutil.MakeProfile("sub", ns).Command("scripted-agent").Default().Obj(),
		testutil.MakeProfile("api", ns).Command("scripted-agent").Billing(fleetv1alpha1.BillingAPI).Env("ANTHROPIC_BASE_URL", "http://llm.invalid").Obj(),
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "lead-fleetd-token", Namespace: ns, Labels: map[string]string{fleetv1alpha1.LabelMember: "lead", fleetv1alpha1.LabelMemberUID: "uid-lead"}},
			Data:       map[string][]byte{fleetv1alpha1.TokenSecretKey: []byte("lead-token")},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "static", Namespace: ns, Labels: map[string]string{fleetv1alpha1.LabelStaticToken: "true"}},
			Data:       map[string][]byte{"primary": []byte(staticToken)},
		},
	}
	c := fake.NewClientBuilder().
		WithScheme(testenv.Scheme()).
		WithStatusSubresource(&fleetv1alpha1.Delegation{}, &fleetv1alpha1.Member{}, &fleetv1alpha1.Profile{}).
		WithIndex(&fleetv1alpha1.Delegation{}, indexReceiverState, indexReceiverStateFunc).
		WithIndex(&fleetv1alpha1.Delegation{}, indexSenderState, indexSenderStateFunc).
		WithIndex(&fleetv1alpha1.Delegation{}, indexSender, indexSenderFunc).
		WithIndex(&fleetv1alpha1.Member{}, identity.IndexMemberTokenHash, identity.IndexMemberToken).
		WithIndex(&fleetv1alpha1.Member{}, identity.IndexMemberPodUID, identity.IndexMemberPod).
		WithObjects(objs...).
		Build()
	g := newGateway(Options{Namespace: ns, StaticTokens: types.NamespacedName{Namespace: ns, Name: "static"}, ProgressInterval: time.Millisecond},
		logr.Discard(), gatewayDeps{cache: c, live: c, static: c, client: c})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	return g, srv
}

// FuzzToolArguments calls every tool with arbitrary arguments, as a primary
// and as a member: no input may panic the gateway, and every refusal must
// be a structured error with a known code.
func FuzzToolArguments(f *testing.F) {
	seeds := []struct {
		tool string
		args string
	}{
		{"bridge_send", `{"content":"hi","sessionId":"w1"}`},
		{"bridge_send", `{"content":"hi","wait":false}`},
		{"bridge_send", `{"content":"hi","sessionId":"w1","timeoutMs":1,"idempotencyKey":"k"}`},
		{"bridge_send", `{"content":"answer","turnId":"d-1.q1"}`},
		{"bridge_send", `{"content":"answer","turnId":".q"}`},
		{"bridge_send", `{"content":"","timeoutMs":-1}`},
		{"bridge_send", `{"content":"x","timeoutMs":1e308}`},
		{"bridge_send", `{"content":"x","timeoutMs":9223372036854775807,"sessionId":"w1","wait":false}`},
		{"bridge_send", `{"content":7}`},
		{"bridge_send", `{"content":"x","extra":true}`},
		{"bridge_send", `[]`},
		{"bridge_send", `null`},
		{"bridge_reply", `{"content":"done"}`},
		{"bridge_reply", `{"content":"\u0000\ud800"}`},
		{"bridge_ask", `{"content":"which?","timeoutMs":1}`},
		{"bridge_poll", `{}`},
		{"bridge_ack", `{"dispatchId":"x"}`},
		{"bridge_ack", `{"ids":["a","a",""]}`},
		{"bridge_ack", `{"ids":null}`},
		{"bridge_status", `{"sessionId":"w1"}`},
		{"bridge_spawn", `{"profile":"api"}`},
		{"bridge_spawn", `{"profile":"../../etc"}`},
		{"bridge_list", `{}`},
		{"bridge_stop", `{"paneId":"w1"}`},
		{"bridge_stop", `{"paneId":""}`},
		{"bridge_profiles", `{}`},
		{"bridge_whoami", `{}`},
		{"bridge_read", `{"sessionId":"w1","source":"recent","lines":5}`},
		{"bridge_read", `{"sessionId":"w1","source":"sideways","lines":-1}`},
		{"bridge_cancel", `{"dispatchId":"w1-abcde"}`},
		{"bridge_cancel", `{"dispatchId":"../x"}`},
		{"team_status", `{"team":"core"}`},
		{"team_message", `{"recipient":"broadcast","content":"hi","team":"core"}`},
		{"team_message", `{"recipient":"lead","content":"hi"}`},
		{"team_manage", `{"action":"add","name":"Bad Name"}`},
		{"team_manage", `{"action":"remove","name":"w1","team":"core"}`},
		{"team_manage", `{"action":"explode"}`},
		{"process_run", `{"command":["true"]}`},
		{"no_such_tool", `{}`},
	}
	for _, s := range seeds {
		f.Add(s.tool, []byte(s.args), false)
		f.Add(s.tool, []byte(s.args), true)
	}
	g, srv := fakeGateway(f)
	h := &harness{url: srv.URL}
	sessions := map[bool]*mcp.ClientSession{}
	for asMember, token := range map[bool]string{false: staticToken, true: "lead-token"} {
		cs, err := h.tryConnect(token, nil)
		if err != nil {
			f.Fatalf("connecting: %v", err)
		}
		f.Cleanup(func() { _ = cs.Close() })
		sessions[asMember] = cs
	}

	f.Fuzz(func(t *testing.T, tool string, args []byte, asMember bool) {
		if !json.Valid(args) {
			return
		}
		// Held calls end when the client gives up.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		res, err := sessions[asMember].CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
		if n := g.svc.panics.Load(); n > 0 {
			t.Fatalf("%d handler panics; last input %s %s", n, tool, args)
		}
		if err != nil {
			// A protocol-level refusal (unknown tool, arguments that are
			// not an object) or the client's own deadline.
			return
		}
		if !res.IsError {
			return
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var body errorBody
		if err := json.Unmarshal(raw, &body); err != nil || body.Error == nil {
			t.Fatalf("%s %s: error result without a structured error: %s", tool, args, raw)
		}
		if !slices.Contains(toolerr.Known, body.Error.Code) {
			t.Fatalf("%s %s: unknown error code %q", tool, args, body.Error.Code)
		}
	})
}
