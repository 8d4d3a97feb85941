package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

// imagesUnavailable says a message's images cannot be delivered, ever: the
// message fails and nothing is typed.
type imagesUnavailable struct{ reason string }

func (e *imagesUnavailable) Error() string { return e.reason }

// placeImages reads the images of d from their Secret, checks that the
// Secret is d's and its bytes match d's digests, and puts them in the member's agent directory, where its
// agent reads them; it says how to type d with them. The Secret is read
// from the API server: fleetd caches no Secret but its members' own.
func (r *DelegationReconciler) placeImages(ctx context.Context, key types.NamespacedName, panes PaneClient, d *fleetv1alpha1.Delegation) (agents.ImagePrompt, error) {
	m := &fleetv1alpha1.Member{}
	if err := r.Client.Get(ctx, key, m); err != nil {
		return agents.ImagePrompt{}, fmt.Errorf("reading member %s: %w", key.Name, err)
	}
	if !agents.TakesImages(m.Status.AgentKind) {
		return agents.ImagePrompt{}, &imagesUnavailable{fmt.Sprintf("member %s runs %s, which cannot take images", m.Name, agentOrCommand(m.Status.AgentKind))}
	}
	if m.Status.AgentDir == "" {
		// Recorded on the member's next pass.
		return agents.ImagePrompt{}, fmt.Errorf("member %s has no agent directory recorded yet", m.Name)
	}
	img := d.Spec.Images
	secret := &corev1.Secret{}
	err := r.Reader.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: img.SecretName}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return agents.ImagePrompt{}, &imagesUnavailable{fmt.Sprintf("the Secret %s with the message's images is gone", img.SecretName)}
	case err != nil:
		return agents.ImagePrompt{}, fmt.Errorf("reading the images of delegation %s: %w", d.Name, err)
	case secret.Type != fleetv1alpha1.SecretTypeImages:
		return agents.ImagePrompt{}, &imagesUnavailable{fmt.Sprintf("the Secret %s is of type %q, not %s", img.SecretName, secret.Type, fleetv1alpha1.SecretTypeImages)}
	case !imagesSecretBelongsTo(secret, d, m):
		return agents.ImagePrompt{}, &imagesUnavailable{fmt.Sprintf("the Secret %s holds the images of another message: it belongs neither to delegation %s nor to member %s", img.SecretName, d.Name, m.Name)}
	}
	dir := agents.AttachmentsDir(m.Status.AgentDir, d.Name)
	files := make([]agents.File, 0, len(img.Items))
	paths := make([]string, 0, len(img.Items))
	for _, it := range img.Items {
		b := secret.Data[it.Key]
		sum := sha256.Sum256(b)
		if int64(len(b)) != it.Size || hex.EncodeToString(sum[:]) != it.SHA256 {
			return agents.ImagePrompt{}, &imagesUnavailable{fmt.Sprintf("image %s in the Secret %s is not the one sent: its bytes do not match their digest", it.Key, img.SecretName)}
		}
		path := filepath.Join(dir, it.Key)
		files = append(files, agents.File{Path: path, Content: b})
		paths = append(paths, path)
	}
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	where, err := r.runtimes().Files(hctx, m)
	if err == nil {
		err = where.Install(hctx, m.Status.AgentDir, dir, files)
	}
	if err != nil {
		return agents.ImagePrompt{}, fmt.Errorf("putting the images of delegation %s in member %s's agent directory: %w", d.Name, m.Name, err)
	}
	return agents.PromptWithImages(m.Status.AgentKind, paths, d.Spec.Content), nil
}

// imagesSecretBelongsTo reports whether secret may hold the images of d, a
// message to member m: the gateway gives an images' Secret to the
// Delegations that carry them and, until it has made them, to their
// recipients. fleetd reads every Secret; were a Delegation's word enough,
// anyone who may create Delegations could have another message's images,
// which they cannot read, written into a member of their choosing.
func imagesSecretBelongsTo(secret *corev1.Secret, d *fleetv1alpha1.Delegation, m *fleetv1alpha1.Member) bool {
	for _, o := range secret.OwnerReferences {
		if o.APIVersion != fleetv1alpha1.GroupVersion.String() {
			continue
		}
		switch {
		case o.Kind == "Delegation" && o.UID == d.UID && o.Name == d.Name:
			return true
		case o.Kind == "Member" && o.UID == m.UID && o.Name == m.Name:
			return true
		}
	}
	return false
}

func agentOrCommand(kind fleetv1alpha1.AgentKind) string {
	if kind == "" {
		return "a plain command"
	}
	return string(kind)
}

// typeWithImages types a message with its images into a member's pane:
// each paste of its own (the image paths Codex attaches), then the prompt
// through agent.prompt. A paste is typed only into an agent that is not
// showing a dialog, which typing would answer; the prompt itself is gated
// by herdr as every prompt is.
func typeWithImages(ctx context.Context, panes PaneClient, paneID string, p agents.ImagePrompt) error {
	if len(p.Pastes) > 0 {
		info, err := panes.AgentGet(ctx, paneID)
		if err != nil {
			return err
		}
		if info.AgentStatus == herdr.AgentStatusBlocked {
			return &herdr.Error{Code: herdr.CodeAgentBlocked, Message: "the agent shows a dialog; its images wait"}
		}
		for _, text := range p.Pastes {
			if err := panes.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: paneID, Text: text}); err != nil {
				return err
			}
		}
	}
	_, err := panes.AgentPrompt(ctx, herdr.AgentPromptParams{Target: paneID, Text: p.Prompt})
	return err
}

// isImagesUnavailable reports whether err says d's images can never be
// delivered.
func isImagesUnavailable(err error) (string, bool) {
	var u *imagesUnavailable
	if errors.As(err, &u) {
		return u.reason, true
	}
	return "", false
}
