package controllers

import (
	"cmp"
	"context"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// What the Member's agent tells fleetd beyond herdr's status: its hooks'
// record (the agent's own session id, the last hook event, what a blocked
// agent waits for) and its transcript (the context left).

// home is where m's known agent keeps what fleetd seeds for it, where it
// runs.
func (r *MemberReconciler) home(m *fleetv1alpha1.Member) agentHome {
	return r.runtimes().of(m).home(m)
}

// observeHooks records what the agent's hooks told fleetd, for agents
// fleetd hooks: the agent's own session id (herdr keeps those only from its
// own integrations), the hook record itself (whose last event AgentHooks
// names), what a blocked agent waits for, and how much context its session
// has left (from the usage its transcript records, Claude Code's and
// Codex's). The record is read where the agent runs (s.files). It says
// when to look again for a transcript still being written: the agent
// writes its turn's last call after the hook that ends the turn, and
// nothing else brings the Member back for it.
func (r *MemberReconciler) observeHooks(ctx context.Context, s *memberScope) (again time.Duration) {
	m := s.member
	var hookMessage string
	if agents.Hooked(m.Status.AgentKind) {
		var tokens fleetv1alpha1.TranscriptCursor
		if m.Status.Usage != nil && m.Status.Usage.Transcript != nil {
			tokens = *m.Status.Usage.Transcript
		}
		o, err := s.files.Observe(ctx, m.Status.AgentKind, r.home(m).Dir, tokens)
		switch {
		case err != nil:
			log.FromContext(ctx).Info("Reading the agent's hook record", "member", klog.KObj(m), "error", err.Error())
		case o.Error != "":
			log.FromContext(ctx).Info("Reading the agent's hook record", "member", klog.KObj(m), "error", o.Error)
		}
		if record := o.Hooks; record != nil {
			if record.SessionID != "" {
				m.Status.AgentSessionID = record.SessionID
			}
			hookMessage = record.Message
			s.facts.hookRecord = record
		}
		if o.Context != nil {
			m.Status.ContextRemainingPercent = ptr.To(o.Context.RemainingPercent())
		}
		if o.Tokens != nil {
			turn, err := r.countTurns(ctx, m, *o.Tokens, s.pricing)
			switch {
			case err != nil:
				// Counted again from the same cursor next time.
				log.FromContext(ctx).Info("Recording the usage of the member's messages", "member", klog.KObj(m), "error", err.Error())
				again = transcriptGrowing
			default:
				m.Status.Usage = addTokens(m.Status.Usage, *o.Tokens, turn)
				r.countTokens(m, o.Tokens.Added)
				switch {
				case o.Tokens.More:
					again = transcriptMore
				case o.Tokens.Added != (fleetv1alpha1.TokenUsage{}):
					again = transcriptGrowing
				}
			}
		}
	}
	priceUsage(m.Status.Usage, s.pricing)
	m.Status.AgentMessage = ""
	if m.Status.AgentStatus == fleetv1alpha1.AgentBlocked {
		m.Status.AgentMessage = cmp.Or(r.Screens.Dialog(client.ObjectKeyFromObject(m)), hookMessage)
	}
	return again
}

// How soon to read a transcript again: at once where a pass read only
// part of what was there, a while later where it grew, until a pass finds
// it the same.
const (
	transcriptMore    = 10 * time.Millisecond
	transcriptGrowing = 2 * time.Second
)

// sooner is the sooner of two requeues, either of which may be none (0).
func sooner(a, b time.Duration) time.Duration {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// addTokens is usage with what a count of the transcript added, counted
// on from the count's cursor, and turn the turn under way after it.
func addTokens(usage *fleetv1alpha1.MemberUsage, count agents.TokenCount, turn *fleetv1alpha1.TurnUsage) *fleetv1alpha1.MemberUsage {
	u := &fleetv1alpha1.MemberUsage{}
	if usage != nil {
		u = usage.DeepCopy()
	}
	u.TokenUsage = u.TokenUsage.Plus(count.Added)
	u.Transcript = &count.Cursor
	u.Turn = turn
	return u
}

// priceUsage sets usage's cost at pricing: cleared without one, or when a
// price cannot be read (the schema allows none such).
func priceUsage(usage *fleetv1alpha1.MemberUsage, pricing *fleetv1alpha1.Pricing) {
	if usage == nil {
		return
	}
	usage.Cost, usage.Currency = pricing.Price(usage.TokenUsage)
}
