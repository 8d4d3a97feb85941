package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
)

// typingPanes records what is typed into a pane whose agent has status.
type typingPanes struct {
	PaneClient
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

// TestImagesOnlyFromTheirOwnSecret: a Delegation delivers images only from
// a Secret that belongs to it, or to its recipient until the gateway has
// handed the Secret on. One that names another message's Secret (a
// kubectl user who cannot read Secrets copied spec.images) fails untyped,
// and nothing lands in the member's agent directory.
func TestImagesOnlyFromTheirOwnSecret(t *testing.T) {
	png := []byte("\x89PNG not really")
	sum := sha256.Sum256(png)
	owner := func(kind, name string, uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: fleetv1alpha1.GroupVersion.String(), Kind: kind, Name: name, UID: uid}
	}
	cases := map[string]struct {
		owners  []metav1.OwnerReference
		refused bool
	}{
		"owned by the delegation":                {owners: []metav1.OwnerReference{owner("Delegation", "d", "d-uid")}},
		"owned by it among others (a broadcast)": {owners: []metav1.OwnerReference{owner("Delegation", "other", "other-uid"), owner("Delegation", "d", "d-uid")}},
		"still owned by the recipient":           {owners: []metav1.OwnerReference{owner("Member", "w1", "w1-uid")}},
		"another message's":                      {owners: []metav1.OwnerReference{owner("Delegation", "primarys", "primarys-uid")}, refused: true},
		"another member's":                       {owners: []metav1.OwnerReference{owner("Member", "victim", "victim-uid")}, refused: true},
		"a namesake of the delegation":           {owners: []metav1.OwnerReference{owner("Delegation", "d", "old-uid")}, refused: true},
		"owned by nobody":                        {refused: true},
		"owned by a kind of another group":       {owners: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Delegation", Name: "d", UID: "d-uid"}}, refused: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			agentDir := t.TempDir()
			m := testutil.MakeMember("w1", "ns").Agent(fleetv1alpha1.AgentClaude).Obj()
			m.UID = "w1-uid"
			m.Status.AgentKind, m.Status.AgentDir = fleetv1alpha1.AgentClaude, agentDir
			secret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "images-x", Namespace: "ns", OwnerReferences: tc.owners},
				Type:       fleetv1alpha1.SecretTypeImages,
				Data:       map[string][]byte{"0.png": png},
			}
			d := testutil.MakeDelegation("d", "ns", "w1", "look").Obj()
			d.UID = "d-uid"
			d.Spec.Images = &fleetv1alpha1.DelegationImages{SecretName: "images-x", Items: []fleetv1alpha1.DelegationImage{
				{Key: "0.png", MediaType: "image/png", Size: int64(len(png)), SHA256: hex.EncodeToString(sum[:])},
			}}
			c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(m, secret).Build()
			r := &DelegationReconciler{Client: c, Reader: c}
			_, err := r.placeImages(context.Background(), client.ObjectKeyFromObject(m), closedPanes{}, d)
			reason, unavailable := isImagesUnavailable(err)
			_, statErr := os.Stat(agents.AttachmentsDir(agentDir, d.Name))
			switch {
			case tc.refused && !unavailable:
				t.Fatalf("placeImages() = %v, want the images refused", err)
			case tc.refused && !strings.Contains(reason, "holds the images of another message"):
				t.Errorf("refused with %q, want a reason naming the Secret as another message's", reason)
			case tc.refused && statErr == nil:
				t.Errorf("the images were written to the member's agent directory")
			case !tc.refused && err != nil:
				t.Fatalf("placeImages() = %v, want the images placed", err)
			case !tc.refused && statErr != nil:
				t.Errorf("the images are not in the member's agent directory: %v", statErr)
			}
		})
	}
}
