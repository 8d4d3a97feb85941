package controllers

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost"
)

// TestRuntimesRouteEachMember: a Member's status.runtime alone says where
// its panes, files and agent directory are; a pod member on a fleetd that
// runs none is refused by name, not sent to the shared pane server.
func TestRuntimesRouteEachMember(t *testing.T) {
	shared := herdr.NewClient("/nonexistent/herdr.sock")
	member := func(rt fleetv1alpha1.Runtime) *fleetv1alpha1.Member {
		return &fleetv1alpha1.Member{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "w1", UID: "0123456789abcdef"},
			Status:     fleetv1alpha1.MemberStatus{Runtime: rt},
		}
	}
	rts := NewRuntimes(shared, nil, "/var/lib/fleetd/agents", []string{"fleetd", "hook"})

	for _, rt := range []fleetv1alpha1.Runtime{"", fleetv1alpha1.RuntimeShared} {
		m := member(rt)
		panes, err := rts.For(m)
		if err != nil || panes != PaneClient(shared) {
			t.Errorf("runtime %q: panes %v, %v; want the shared pane server", rt, panes, err)
		}
		if h := rts.of(m).home(m); h.Dir != "/var/lib/fleetd/agents/team/w1-01234567" || len(h.HookCommand) != 2 {
			t.Errorf("runtime %q: home %+v, want a directory of the member incarnation's own under the agent directory", rt, h)
		}
		if _, isPod := rts.of(m).(*podRuntime); isPod {
			t.Errorf("runtime %q runs in a pod", rt)
		}
	}

	pod := member(fleetv1alpha1.RuntimePod)
	if panes, err := rts.For(pod); !errors.Is(err, panehost.ErrNoPaneHost) || panes != nil {
		t.Errorf("a pod member on a fleetd without pod members: %v, %v; want ErrNoPaneHost", panes, err)
	}
	if _, err := rts.Files(t.Context(), pod); !errors.Is(err, panehost.ErrNoPaneHost) {
		t.Errorf("a pod member's files on a fleetd without pod members: %v; want ErrNoPaneHost", err)
	}
	if h := rts.of(pod).home(pod); h.Dir != podAgentDir {
		t.Errorf("pod member's home %+v, want %s on its workspace", h, podAgentDir)
	}

	none := NewRuntimes(nil, nil, "", nil)
	if _, err := none.For(member(fleetv1alpha1.RuntimeShared)); !errors.Is(err, panehost.ErrNoPaneHost) {
		t.Errorf("a shared member on a fleetd without a pane server: %v; want ErrNoPaneHost", err)
	}
}
