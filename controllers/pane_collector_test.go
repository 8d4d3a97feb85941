package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
)

func TestParseWorkspaceLabel(t *testing.T) {
	cases := map[string]struct {
		label   string
		wantKey types.NamespacedName
		wantUID types.UID
		wantOK  bool
	}{
		"a member's":       {label: "fleetd:team/w1:0f4d-uid", wantKey: types.NamespacedName{Namespace: "team", Name: "w1"}, wantUID: "0f4d-uid", wantOK: true},
		"someone else's":   {label: "my shell"},
		"no uid":           {label: "fleetd:team/w1"},
		"no namespace":     {label: "fleetd:w1:uid"},
		"an empty name":    {label: "fleetd:team/:uid"},
		"an empty label":   {label: ""},
		"another prefix":   {label: "fleetdx:team/w1:uid"},
		"colons in the id": {label: "fleetd:team/w1:a:b", wantKey: types.NamespacedName{Namespace: "team", Name: "w1"}, wantUID: "a:b", wantOK: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			key, uid, ok := parseWorkspaceLabel(tc.label)
			if key != tc.wantKey || uid != tc.wantUID || ok != tc.wantOK {
				t.Errorf("parseWorkspaceLabel(%q) = %v, %q, %v", tc.label, key, uid, ok)
			}
		})
	}
}

// TestPaneCollectorClosesWhatNoMemberOwns reproduces the leak an attack
// run found: a Member created and stopped at once left a live pane and
// process behind. The collector closes the workspaces whose Member is gone
// (or is another incarnation now), and leaves alone a live Member's and
// every workspace that is not a Member's.
func TestPaneCollectorClosesWhatNoMemberOwns(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeMember("live", ns).Command(scriptedAgent).Obj())
	live := waitReady(t, ns, "live")
	c := h.client()
	ctx := context.Background()
	for _, label := range []string{
		"fleetd:" + ns + "/ghost:11111111-2222-3333-4444-555555555555",
		"fleetd:" + ns + "/live:an-earlier-incarnation",
		"a person's own shell",
	} {
		if _, err := c.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Label: label}); err != nil {
			t.Fatal(err)
		}
	}
	collector := &PaneCollector{Panes: c, Reader: env.Client}
	closed, err := collector.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(closed) != 2 {
		t.Errorf("closed %q, want the ghost's and the earlier incarnation's", closed)
	}
	testutil.Eventually(t, "only the live member's and the person's workspaces", func() (bool, string) {
		var labels []string
		for _, ws := range workspaces(t, h) {
			labels = append(labels, ws.Label)
		}
		return len(labels) == 2 && fmt.Sprint(labels) == fmt.Sprint([]string{workspaceLabel(live), "a person's own shell"}), fmt.Sprint(labels)
	}, testutil.Within(30*time.Second))
}

// TestDeleteClosesAPaneNoPassRecorded: a Member deleted before any pass
// wrote down its workspace id still has its pane closed, found by label.
func TestDeleteClosesAPaneNoPassRecorded(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	m := testutil.MakeMember("quick", ns).Command(scriptedAgent).Obj()
	m.Finalizers = []string{fleetv1alpha1.MemberFinalizer}
	create(t, m)
	m, err := getMember(t, ns, "quick")
	if err != nil {
		t.Fatal(err)
	}
	// An earlier pass made the pane and stopped before writing it down.
	if _, err := h.client().WorkspaceCreate(context.Background(), herdr.WorkspaceCreateParams{Label: workspaceLabel(m)}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	// The collector's sweep would close it too: this asks the delete path.
	runManager(t, env.Config, ns, func(ctx context.Context, mgr ctrl.Manager) error {
		r := &MemberReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Panes: h.client(), PaneWatch: NewPaneWatch(h.client()),
			Recorder: mgr.GetEventRecorder("test"), Clock: clock.RealClock{}, AgentDir: t.TempDir()}
		if err := mgr.Add(r.PaneWatch); err != nil {
			return err
		}
		return r.SetupWithManager(mgr)
	})
	testutil.Eventually(t, "the member gone and its pane closed", func() (bool, string) {
		_, err := getMember(t, ns, "quick")
		ws := workspaces(t, h)
		return err != nil && len(ws) == 0, fmt.Sprintf("member: %v, workspaces: %+v", err, ws)
	})
}
