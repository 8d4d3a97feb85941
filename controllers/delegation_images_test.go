package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// typingPanes records what is typed into a pane whose agent has status.
type typingPanes struct {
	Panes
	status herdr.AgentStatus
	typed  []string
}

func (p *typingPanes) AgentGet(context.Context, string) (*herdr.AgentInfo, error) {
	return &herdr.AgentInfo{AgentStatus: p.status}, nil
}

func (p *typingPanes) PaneSendInput(_ context.Context, in herdr.PaneSendInputParams) error {
	p.typed = append(p.typed, "paste "+in.Text)
	return nil
}

func (p *typingPanes) AgentPrompt(_ context.Context, in herdr.AgentPromptParams) (*herdr.AgentInfo, error) {
	p.typed = append(p.typed, "prompt "+in.Text)
	return &herdr.AgentInfo{}, nil
}

// TestTypeWithImages: the pastes come first, each alone, then the prompt;
// nothing is pasted into an agent that shows a dialog.
func TestTypeWithImages(t *testing.T) {
	cases := map[string]struct {
		status    herdr.AgentStatus
		prompt    agents.ImagePrompt
		want      []string
		wantError error
	}{
		"a mention in the prompt": {status: herdr.AgentStatusIdle, prompt: agents.ImagePrompt{Prompt: "@/d/0.png\nhi"}, want: []string{"prompt @/d/0.png\nhi"}},
		"pastes, then the prompt": {
			status: herdr.AgentStatusIdle, prompt: agents.ImagePrompt{Pastes: []string{"/d/0.png", "/d/1.png"}, Prompt: "\nhi"},
			want: []string{"paste /d/0.png", "paste /d/1.png", "prompt \nhi"},
		},
		"no paste into a dialog": {status: herdr.AgentStatusBlocked, prompt: agents.ImagePrompt{Pastes: []string{"/d/0.png"}, Prompt: "\nhi"}, wantError: herdr.ErrAgentBlocked},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := &typingPanes{status: tc.status}
			err := typeWithImages(context.Background(), p, "w1:p1", tc.prompt)
			if !errors.Is(err, tc.wantError) {
				t.Fatalf("typeWithImages() = %v, want %v", err, tc.wantError)
			}
			if diff := cmp.Diff(tc.want, p.typed); diff != "" {
				t.Errorf("typed (-want +got):\n%s", diff)
			}
		})
	}
}

// TestImagesToAPlainCommandFailUntyped: a Delegation with images for a
// member that cannot take them (made with kubectl: the gateway refuses
// it) fails without typing anything, and the queue moves on.
func TestImagesToAPlainCommandFailUntyped(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startManagerOn(t, env.Config, ns, h.client(), true)
	log := agentWithLog(t, ns, "w1")
	withImages := testutil.MakeDelegation("pictures", ns, "w1", "silent: look").Obj()
	withImages.Spec.Images = &fleetv1alpha1.DelegationImages{SecretName: "images-x", Items: []fleetv1alpha1.DelegationImage{
		{Key: "0.png", MediaType: "image/png", Size: 3, SHA256: strings.Repeat("0", 64)},
	}}
	create(t, sequenced(withImages, 1))
	create(t, sequenced(testutil.MakeDelegation("words", ns, "w1", "silent: words only").Obj(), 2))
	d := waitPhase(t, ns, "pictures", fleetv1alpha1.DelegationFailed)
	if msg := conditionMessage(d, fleetv1alpha1.ConditionSettled); !strings.Contains(msg, "cannot take images") || d.Status.DeliveringAt != nil {
		t.Errorf("settled %q (delivering at %v), want a failure before anything was typed", msg, d.Status.DeliveringAt)
	}
	waitPhase(t, ns, "words", fleetv1alpha1.DelegationTurnDone)
	if got := received(t, log); len(got) != 1 || got[0] != "silent: words only" {
		t.Errorf("received %q, want only the message without images", got)
	}
}
