package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

// TestUnclaimedWarmPodDiscoversOnly: the token of a warm Pod no Member has
// claimed opens an MCP session and lists the tools, as an agent started in
// it ahead of its claim does at its start, and calls no tool, nor reaches
// REST; once a Member claims the Pod, the same token is the Member's.
func TestUnclaimedWarmPodDiscoversOnly(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	// Its account may act as a primary: the token must still open nothing.
	env.ServiceAccountToken(t, ns, "runner", fleetv1alpha1.GatewayAudience)
	env.AllowDelegations(t, ns, "runner")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coders-warm-abcde", Namespace: ns, Labels: map[string]string{
			fleetv1alpha1.LabelMember: "", fleetv1alpha1.LabelPool: "coders",
		}},
		Spec: corev1.PodSpec{ServiceAccountName: "runner", Containers: []corev1.Container{{Name: "agent", Image: "worker"}}},
	}
	create(t, pod)
	token := env.PodToken(t, pod)

	cs := h.connect(t, token, nil)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("listing the tools with an unclaimed warm pod's token: %v", err)
	}
	if !slices.ContainsFunc(tools.Tools, func(tl *mcp.Tool) bool { return tl.Name == "bridge_whoami" }) {
		t.Errorf("the tools listed: %d, without bridge_whoami", len(tools.Tools))
	}
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bridge_whoami"}); err == nil && !res.IsError {
		t.Fatalf("an unclaimed warm pod's token called bridge_whoami: %+v", res.StructuredContent)
	}
	// The stream a client opens for the server's messages is no login
	// prompt: the stateless gateway has none to offer, and says so.
	stream, _ := http.NewRequest(http.MethodGet, h.url+"/mcp", nil)
	stream.Header.Set("Authorization", "Bearer "+token)
	stream.Header.Set("Accept", "text/event-stream")
	if resp, err := http.DefaultClient.Do(stream); err != nil || resp.StatusCode == http.StatusUnauthorized {
		t.Errorf("GET /mcp with an unclaimed warm pod's token: %v, %v; want no 401", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ := http.NewRequest(http.MethodGet, h.url+"/agents", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("REST with an unclaimed warm pod's token: %v, %v; want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	// The claim, as the Member reconciler makes it: the token is the
	// Member's. (The SDK's client closes its session on the refusal
	// above; an agent makes no call before its claim.)
	m := testutil.MakeMember("w1", ns).Profile("coders").Obj()
	create(t, m)
	pod.Labels[fleetv1alpha1.LabelMember], pod.Labels[fleetv1alpha1.LabelMemberUID] = m.Name, string(m.UID)
	if err := env.Client.Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	env.SetMemberStatus(t, m, func(st *fleetv1alpha1.MemberStatus) {
		st.PodName, st.PodUID, st.PodPool, st.Runtime = pod.Name, string(pod.UID), "coders", fleetv1alpha1.RuntimePod
	})
	testutil.Eventually(t, "the claimed pod's token to be the member's", func() error {
		got := callTool[WhoamiOutput](t, h.connect(t, token, nil), "bridge_whoami", nil)
		if got.err != nil || got.out.Name != "w1" {
			return fmt.Errorf("%+v", got)
		}
		return nil
	})
}
