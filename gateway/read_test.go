package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
)

// screenPanes answers every pane read with one screen, and every agent
// lookup with one title and status: a pane server frozen on a screen.
type screenPanes struct {
	screen, title string
	status        herdr.AgentStatus
	// sources records what each read asked for.
	sources chan herdr.ReadParams
}

func (p *screenPanes) PaneRead(_ context.Context, r herdr.ReadParams) (*herdr.PaneRead, error) {
	select {
	case p.sources <- r:
	default:
	}
	return &herdr.PaneRead{PaneID: r.PaneID, Source: r.Source, Text: p.screen}, nil
}

func (p *screenPanes) AgentGet(_ context.Context, target string) (*herdr.AgentInfo, error) {
	return &herdr.AgentInfo{PaneID: target, AgentStatus: p.status, TerminalTitle: ptr.To(p.title)}, nil
}

// TestReadDetectionExplainsTheStatus: bridge_read source detection shows
// the text the screen rules look at, the rule that decided and the state,
// for a Claude Code member with a permission dialog on screen; for a plain
// command it shows the status and no rules.
func TestReadDetectionExplainsTheStatus(t *testing.T) {
	screen, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "herdr", "detect", "testdata", "claude", "permission-bash.txt"))
	if err != nil {
		t.Fatal(err)
	}
	panes := &screenPanes{screen: string(screen), title: "✳ Claude Code", status: herdr.AgentStatusBlocked, sources: make(chan herdr.ReadParams, 8)}
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{Panes: panes})
	cc, _ := addMember(t, testutil.MakeMember("cc", ns).Agent(fleetv1alpha1.AgentClaude).Obj())
	env.SetMemberStatus(t, cc, func(st *fleetv1alpha1.MemberStatus) {
		st.PaneID, st.AgentKind, st.AgentStatus = "w1:p1", fleetv1alpha1.AgentClaude, fleetv1alpha1.AgentBlocked
	})
	plain, _ := addMember(t, member("plain", ns).Obj())
	env.SetMemberStatus(t, plain, func(st *fleetv1alpha1.MemberStatus) {
		st.PaneID, st.AgentStatus = "w2:p1", fleetv1alpha1.AgentIdle
	})
	cs := h.connect(t, staticToken, nil)

	var out ReadOutput
	testutil.Eventually(t, "", func() error {
		got := callTool[ReadOutput](t, cs, "bridge_read", map[string]any{"sessionId": "cc", "source": "detection"})
		out = got.out
		return errIf(got.err != nil, "bridge_read: %v", got.err)
	})
	if r := <-panes.sources; r.Source != herdr.ReadSourceDetection || r.Lines != nil {
		t.Errorf("read %+v, want the whole detection text, as the screen watch reads it", r)
	}
	d := out.Detection
	switch {
	case d == nil:
		t.Fatalf("no detection in %+v", out)
	case d.State != "blocked" || d.Rule != "permission_prompt" || !d.Visible:
		t.Errorf("detection concluded %s by %q (visible %v), want blocked by permission_prompt, seen on screen", d.State, d.Rule, d.Visible)
	case d.AgentStatus != "blocked" || d.Title != "✳ Claude Code" || d.Manifest == "":
		t.Errorf("detection = %+v, want herdr's status, the title and the manifest", d)
	}
	if d != nil && !containsRule(d.Matches, "permission_prompt") {
		t.Errorf("matches %+v lack the deciding rule", d.Matches)
	}
	if d != nil && !strings.Contains(d.Region, "curl -s http://127.0.0.1:18080/z") {
		t.Errorf("region %q, want the dialog", d.Region)
	}
	if !strings.Contains(out.Text, "Do you want to proceed?") {
		t.Errorf("text %q, want the screen the rules look at", out.Text)
	}

	got := callTool[ReadOutput](t, cs, "bridge_read", map[string]any{"sessionId": "plain", "source": "detection"})
	if got.err != nil || got.out.Detection == nil || got.out.Detection.Rule != "" || got.out.Detection.Manifest != "" || len(got.out.Detection.Matches) != 0 {
		t.Errorf("a plain command's detection: %+v %v, want the status alone", got.out.Detection, got.err)
	}
	wantCode(t, callTool[ReadOutput](t, cs, "bridge_read", map[string]any{"sessionId": "cc", "source": "sideways"}), toolerr.InvalidArgument)
}

func containsRule(ms []DetectionMatch, id string) bool {
	for _, m := range ms {
		if m.Rule == id {
			return true
		}
	}
	return false
}
