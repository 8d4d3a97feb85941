package controllers

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

// home is where a Member's known agent keeps what fleetd seeds for it: one
// directory per Member incarnation, so a new Member of the same name starts
// afresh.
func (r *MemberReconciler) home(m *fleetv1alpha1.Member) agentHome {
	uid := string(m.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return agentHome{Dir: filepath.Join(r.AgentDir, m.Namespace, m.Name+"-"+uid), HookCommand: r.HookCommand}
}

// observeHooks records what the agent's hooks told fleetd, for agents
// fleetd hooks: the agent's own session id (herdr keeps those only from its
// own integrations), whether herdr takes fleetd's reports, and what a
// blocked agent waits for.
func (r *MemberReconciler) observeHooks(ctx context.Context, s *memberScope, a *herdr.AgentInfo) {
	m := s.member
	key := client.ObjectKeyFromObject(m)
	var hookMessage string
	if agents.Hooked(m.Status.AgentKind) {
		st, ok, err := agents.ReadHookStatus(r.home(m).Dir)
		switch {
		case err != nil:
			log.FromContext(ctx).Info("Reading the agent's hook record", "member", klog.KObj(m), "error", err.Error())
		case ok:
			if st.SessionID != "" {
				m.Status.AgentSessionID = st.SessionID
			}
			hookMessage = st.Message
			r.observeContext(ctx, m, st)
		}
		switch {
		case a != nil && a.AgentSession != nil && a.AgentSession.Source != agents.ReportSource:
			s.condition(fleetv1alpha1.ConditionAgentHooks, metav1.ConditionFalse, fleetv1alpha1.ReasonOtherStatusSource,
				fmt.Sprintf("herdr's status for this pane belongs to %s (session %s) and drops fleetd's reports; the status shown is that source's", a.AgentSession.Source, a.AgentSession.Value))
		case ok:
			s.condition(fleetv1alpha1.ConditionAgentHooks, metav1.ConditionTrue, fleetv1alpha1.ReasonHooksReporting,
				fmt.Sprintf("the agent's hooks report its status to herdr as %s; last: %s", agents.ReportSource, st.Event))
		default:
			s.condition(fleetv1alpha1.ConditionAgentHooks, metav1.ConditionUnknown, fleetv1alpha1.ReasonAwaitingHooks, "no hook of the agent has run yet")
		}
	}
	m.Status.AgentMessage = ""
	if m.Status.AgentStatus == fleetv1alpha1.AgentBlocked {
		m.Status.AgentMessage = cmp.Or(r.Screens.Dialog(key), hookMessage)
	}
}

// observeContext records how much context the agent's session has left,
// from the usage its transcript records (Claude Code's and Codex's).
func (r *MemberReconciler) observeContext(ctx context.Context, m *fleetv1alpha1.Member, st agents.HookStatus) {
	if st.TranscriptPath == "" {
		return
	}
	u, ok, err := agents.ContextUsageOf(m.Status.AgentKind, r.home(m).Dir, st.TranscriptPath)
	switch {
	case err != nil:
		log.FromContext(ctx).Info("Reading the agent's context usage", "member", klog.KObj(m), "error", err.Error())
	case ok:
		m.Status.ContextRemainingPercent = ptr.To(u.RemainingPercent())
	}
}
