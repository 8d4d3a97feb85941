package controllers

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/internal/textcut"
	"github.com/fleetd/fleetd/internal/tracing"
)

// Carrying a worker's words to a member sender nobody waits for: a reply
// or a question goes into its pane as a Delegation of its own, through
// the same gated queue.

// acknowledgeOriginal records on the Delegation a carrier answers that its
// reply reached the sender: the carrier was typed into the sender's pane.
// Until then the reply stays in the sender's bridge_poll, so a carrier that
// never gets typed (withdrawn, refused, pane lost) loses nothing.
func (r *DelegationReconciler) acknowledgeOriginal(ctx context.Context, carrier *fleetv1alpha1.Delegation, now time.Time) error {
	original := &fleetv1alpha1.Delegation{}
	err := r.fleet(r.Client).Get(ctx, types.NamespacedName{Namespace: carrier.Namespace, Name: carrier.Spec.InReplyTo}, original)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting delegation %s, answered by %s: %w", carrier.Spec.InReplyTo, carrier.Name, err)
	}
	original = r.own.current(original).(*fleetv1alpha1.Delegation)
	if original.Status.ReplyDeliveredAs != carrier.Name {
		// It carried a question, not the outcome.
		return nil
	}
	if changed, _ := delegation.Acknowledge(original, now); !changed {
		return nil
	}
	return r.write(ctx, original)
}

// carryReply sends a reply nobody waits for into its member sender's pane, as
// a Delegation of its own that goes through the same gated queue.
func (r *DelegationReconciler) carryReply(ctx context.Context, d *fleetv1alpha1.Delegation) error {
	name := d.Name + "-reply"
	content := fmt.Sprintf("Reply from %s to your message %s:\n%s", d.Spec.To, d.Name, *d.Status.Reply)
	if err := r.carry(ctx, d, name, content); err != nil {
		return fmt.Errorf("creating the detached reply of %s: %w", d.Name, err)
	}
	delegation.ReplyCarried(d, name)
	return r.write(ctx, d)
}

// carryQuestion sends a question nobody waits for into its member sender's
// pane, with the turn id to answer it by, through the same gated queue.
func (r *DelegationReconciler) carryQuestion(ctx context.Context, d *fleetv1alpha1.Delegation) error {
	q := delegation.OpenQuestion(d)
	name := fmt.Sprintf("%s-q%d", d.Name, len(d.Status.Questions))
	content := fmt.Sprintf("Question from %s about your message %s:\n%s\n\nAnswer it with bridge_send {\"turnId\": %q, \"content\": <your answer>}.", d.Spec.To, d.Name, q.Text, q.TurnID)
	if err := r.carry(ctx, d, name, content); err != nil {
		return fmt.Errorf("creating the detached question of %s: %w", d.Name, err)
	}
	delegation.QuestionCarried(d, name)
	return r.write(ctx, d)
}

// carry creates the Delegation name that types content, something d's
// worker said, into d's member sender's pane. It is plumbing (inReplyTo d):
// owed to nobody, one hop further than d.
func (r *DelegationReconciler) carry(ctx context.Context, d *fleetv1alpha1.Delegation, name, content string) error {
	content = textcut.Head(content, fleetv1alpha1.MaxContentBytes)
	carrier := &fleetv1alpha1.Delegation{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: d.Namespace,
			Labels:    map[string]string{fleetv1alpha1.LabelMember: d.Spec.From.Name, fleetv1alpha1.LabelShard: r.shardOf(d.Namespace, d.Spec.From.Name)},
			Annotations: map[string]string{
				fleetv1alpha1.AnnotationSequence: r.Clock.Now().UTC().Format(time.RFC3339Nano),
			},
		},
		Spec: fleetv1alpha1.DelegationSpec{
			From:      fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: d.Spec.To},
			To:        d.Spec.From.Name,
			Content:   content,
			Wait:      ptr.To(false),
			InReplyTo: d.Name,
			Hops:      d.Spec.Hops + 1,
		},
	}
	tracing.Copy(d, carrier)
	if err := r.Client.Create(ctx, carrier); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
