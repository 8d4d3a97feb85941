package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/textcut"
	"github.com/fleetd/fleetd/internal/tracing"
)

// Typing into a member's pane: a message delivered (its intent recorded
// first), a turn interrupted, and the tail a turn_done carries.

// deliver records the intent, then types the message. The intent comes
// first so that a controller stopped in between never types it twice (see
// delegation.Decide); what this process saw typed, it remembers, so the
// typing costs no second write.
func (r *DelegationReconciler) deliver(ctx context.Context, member types.NamespacedName, panes PaneClient, d *fleetv1alpha1.Delegation, m delegation.Member, command bool, now time.Time) error {
	var images *agents.ImagePrompt
	if d.Spec.Images != nil {
		// The images go where the agent reads them before anything is
		// typed; ones that cannot be delivered fail the message untyped.
		p, err := r.placeImages(ctx, member, panes, d)
		if reason, ok := isImagesUnavailable(err); ok {
			delegation.Fail(d, now, fleetv1alpha1.ReasonImagesUnavailable, reason)
			if err := r.writeTraced(ctx, d, tracing.SpanSettled); err != nil {
				return err
			}
			r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonImagesUnavailable, "Deliver", "%s", delegation.SettledMessage(d, ""))
			return nil
		}
		if err != nil {
			return err
		}
		images = &p
	}
	seq, err := typingSeq(ctx, panes, m)
	if err != nil {
		return err
	}
	traceQueued(ctx, d, member.Name)
	delegation.BeginDelivery(d, now, delegation.Target{PaneID: m.PaneID, TerminalID: m.TerminalID, Seq: seq})
	if err := r.writeTraced(ctx, d, tracing.SpanIntentWritten); err != nil {
		return err
	}
	if m.MaySuspend {
		// The suspension and this intent are both written before either
		// side acts: the suspension sees the intent and keeps the Pod, or
		// this sees the suspension and types nothing.
		suspended, err := r.suspendedNow(ctx, member, m.PaneID)
		if err != nil {
			return err
		}
		if suspended {
			delegation.DeliveryPostponed(d, "the member is being suspended; the message waits for its resume")
			return r.write(ctx, d)
		}
	}
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	_, typing := tracing.Start(hctx, d, tracing.SpanTyped)
	if images != nil {
		err = typeWithImages(hctx, panes, m.PaneID, *images)
	} else {
		err = typeMessage(hctx, panes, m.PaneID, command, d.Spec.Content)
	}
	endSpan(typing, d, err)
	var refusal *herdr.Error
	switch {
	case err == nil:
		r.markTyped(member, d.Name)
		return nil
	case errors.Is(err, herdr.ErrAgentBlocked):
		// herdr saw a dialog the member's status did not show yet: the
		// message waits, and so does the queue, until the status moves.
		r.blockQueue(member, m.Seq)
		delegation.DeliveryPostponed(d, "herdr refused it for now ("+herdr.CodeAgentBlocked+"): a dialog is on screen; it waits for the member")
		return r.write(ctx, d)
	case errors.As(err, &refusal):
		delegation.Fail(d, r.Clock.Now(), fleetv1alpha1.ReasonDeliveryRefused, fmt.Sprintf("herdr refused the delivery: %s: %s", refusal.Code, refusal.Message))
		if err := r.writeTraced(ctx, d, tracing.SpanSettled); err != nil {
			return err
		}
		r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonDeliveryRefused, "Deliver", "%s", delegation.SettledMessage(d, ""))
		return nil
	default:
		// Whether it was typed is unknown; Decide settles it once a pickup
		// proves it or the confirm window passes.
		return fmt.Errorf("typing delegation %s into pane %s: %w", d.Name, m.PaneID, err)
	}
}

// typingSeq is the agent's status change count just before a message is
// typed into pane m.PaneID, asked of herdr: a later change is what proves
// the message picked up. The Member's status can lag it (its writes are
// coalesced, and after a shard changed hands it is the last replica's), and
// a change it had not shown yet would look like the pickup of a message
// the agent never saw. A pane herdr knows no agent in (a command member's)
// keeps the status' count.
func typingSeq(ctx context.Context, panes PaneClient, m delegation.Member) (int64, error) {
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	info, err := panes.AgentGet(hctx, m.PaneID)
	var refusal *herdr.Error
	switch {
	case errors.As(err, &refusal):
		return m.Seq, nil
	case err != nil:
		return 0, fmt.Errorf("reading the agent in pane %s before typing: %w", m.PaneID, err)
	case info.TerminalID != "" && m.TerminalID != "" && info.TerminalID != m.TerminalID:
		return 0, fmt.Errorf("pane %s runs terminal %s, not %s as its member's status says; nothing is typed until the status catches up", m.PaneID, info.TerminalID, m.TerminalID)
	}
	return max(m.Seq, int64(info.StateChangeSeq)), nil
}

// suspendedNow reads the member live: whether it was written suspended
// (or its pane paneID is no longer its own) since the cached view a
// delivery was decided on.
func (r *DelegationReconciler) suspendedNow(ctx context.Context, member types.NamespacedName, paneID string) (bool, error) {
	reader := r.Reader
	if reader == nil {
		reader = r.Client
	}
	m := &fleetv1alpha1.Member{}
	if err := reader.Get(ctx, member, m); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading member %s before typing into it: %w", member.Name, err)
	}
	return m.Status.SuspendedAt != nil || m.Status.PaneID != paneID, nil
}

// interrupt ends the member's turn the way a person would: Escape for an
// agent CLI, Ctrl-C for a plain command. It returns the key.
func (r *DelegationReconciler) interrupt(ctx context.Context, panes PaneClient, paneID string, command bool) (string, error) {
	key := "esc"
	if command {
		key = "ctrl+c"
	}
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	if err := panes.PaneSendKeys(hctx, paneID, key); err != nil && !errors.Is(err, herdr.ErrNotFound) {
		return "", fmt.Errorf("interrupting the turn in pane %s: %w", paneID, err)
	}
	return key, nil
}

// typeMessage types text into a member's pane and submits it: through
// herdr's agent.prompt, or, for a plain command herdr does not know as an
// agent (it answers agent_not_ready or agent_not_found), as input and Enter
// in one pane.send_input. One call, so that a controller stopped halfway
// never leaves text in the input line for the next message to be appended
// to; herdr pastes the text as a bracketed paste when the program asks for
// one, which is what keeps an Enter right behind it from being read as part
// of the text.
func typeMessage(ctx context.Context, panes PaneClient, paneID string, command bool, text string) error {
	_, err := panes.AgentPrompt(ctx, herdr.AgentPromptParams{Target: paneID, Text: text})
	if !command || !(errors.Is(err, herdr.ErrAgentNotReady) || errors.Is(err, herdr.ErrAgentNotFound)) {
		return err
	}
	return panes.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: paneID, Text: text, Keys: []string{"enter"}})
}

// readTail reads what a turn_done carries of pane paneID's recent output:
// its last tailLines lines, cut to what a Delegation holds.
func readTail(ctx context.Context, panes PaneClient, paneID string) (string, error) {
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	lines := tailLines
	read, err := panes.PaneRead(hctx, herdr.ReadParams{PaneID: paneID, Source: herdr.ReadSourceRecent, Lines: &lines})
	if err != nil {
		if errors.Is(err, herdr.ErrNotFound) {
			return "", nil
		}
		return "", fmt.Errorf("reading the tail of pane %s: %w", paneID, err)
	}
	return textcut.Tail(read.Text, fleetv1alpha1.MaxContentBytes), nil
}
