package gateway

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
)

// providerCommand is the provider of members that run a plain command.
const providerCommand = "command"

// startFailureReasons are the reasons with which a Member's conditions
// say its agent could not be started, or not be kept running.
var startFailureReasons = []string{
	fleetv1alpha1.ReasonAgentStartFailed, fleetv1alpha1.ReasonProfileNotFound, fleetv1alpha1.ReasonSecretNotFound,
	fleetv1alpha1.ReasonSubscriptionBoundary, fleetv1alpha1.ReasonBlockedAtStart, fleetv1alpha1.ReasonUnschedulable,
	fleetv1alpha1.ReasonPodLost, fleetv1alpha1.ReasonHerdrUnreachable,
}

// agentKindOf is the agent a member runs: the kind it was started as, or
// before it started the one its spec or Profile names; "" for a plain
// command.
func agentKindOf(m *fleetv1alpha1.Member, profiles map[string]*fleetv1alpha1.Profile) fleetv1alpha1.AgentKind {
	switch {
	case m.Status.AgentKind != "":
		return m.Status.AgentKind
	case m.Spec.Agent != "" || len(m.Spec.Command) > 0:
		return m.Spec.Agent
	}
	if p := profiles[m.Spec.Profile]; p != nil {
		return p.Spec.Agent
	}
	return ""
}

// providers diagnoses every agent the caller's namespace runs or can run:
// Claude Code and Codex always, any other kind a Profile or Member names,
// and plain commands. A CLI is looked for where the shared pane server's
// panes run, on this machine; a pod member's comes from its image, and its
// start failure says when it is missing there.
func (s *service) providers(ctx context.Context, p *identity.Principal) (*ProvidersDiagnostics, error) {
	if err := s.allow(ctx, p, identity.GetMembers); err != nil {
		return nil, err
	}
	profiles, err := s.profiles(ctx, p.Namespace)
	if err != nil {
		return nil, err
	}
	members, err := s.members(ctx, p.Namespace)
	if err != nil {
		return nil, err
	}
	byName := map[string]*fleetv1alpha1.Profile{}
	views := map[string]*ProviderView{}
	view := func(name string) *ProviderView {
		if v, ok := views[name]; ok {
			return v
		}
		v := &ProviderView{Agent: name, Profiles: []ProviderProfile{}, Members: []ProviderMember{}}
		views[name] = v
		return v
	}
	view(string(fleetv1alpha1.AgentClaude))
	view(string(fleetv1alpha1.AgentCodex))
	view(providerCommand)
	def := defaultProfile(profiles)
	for i := range profiles {
		pr := &profiles[i]
		byName[pr.Name] = pr
		pv := ProviderProfile{Name: pr.Name, Billing: string(fleetv1alpha1.BillingOf(pr)), Model: pr.Spec.Model, Default: def != nil && def.Name == pr.Name}
		name := string(pr.Spec.Agent)
		if name == "" {
			name = providerCommand
			if len(pr.Spec.Command) > 0 {
				pv.Program = cliView(agents.ProbeCommand(pr.Spec.Command[0]))
			}
		}
		view(name).Profiles = append(view(name).Profiles, pv)
	}
	for i := range members {
		m := &members[i]
		name := cmp.Or(string(agentKindOf(m, byName)), providerCommand)
		mv := ProviderMember{Name: m.Name, Profile: m.Spec.Profile, Runtime: string(m.Status.Runtime), Phase: string(m.Status.Phase), AgentStatus: string(m.Status.AgentStatus), Restarts: m.Status.Restarts}
		mv.LastStartFailure = startFailure(m)
		if m.Status.LastRestartReason != "" {
			mv.LastRestart = &MemberRestart{Reason: m.Status.LastRestartReason, At: timeString(m.Status.LastRestartTime)}
		}
		view(name).Members = append(view(name).Members, mv)
	}

	// The CLIs are asked for their versions at once: each is a process.
	var wg sync.WaitGroup
	for name, v := range views {
		if name == providerCommand {
			continue
		}
		wg.Go(func() { v.CLI = cliView(agents.ProbeAgent(ctx, fleetv1alpha1.AgentKind(name))) })
	}
	wg.Wait()
	out := &ProvidersDiagnostics{Namespace: p.Namespace, Providers: make([]ProviderView, 0, len(views))}
	for _, v := range views {
		slices.SortFunc(v.Profiles, func(a, b ProviderProfile) int { return strings.Compare(a.Name, b.Name) })
		slices.SortFunc(v.Members, func(a, b ProviderMember) int { return strings.Compare(a.Name, b.Name) })
		out.Providers = append(out.Providers, *v)
	}
	// Known agents first, in a fixed order, then the others by name, plain
	// commands last.
	rank := func(name string) int {
		switch name {
		case string(fleetv1alpha1.AgentClaude):
			return 0
		case string(fleetv1alpha1.AgentCodex):
			return 1
		case providerCommand:
			return 3
		}
		return 2
	}
	slices.SortFunc(out.Providers, func(a, b ProviderView) int {
		return cmp.Or(cmp.Compare(rank(a.Agent), rank(b.Agent)), strings.Compare(a.Agent, b.Agent))
	})
	return out, nil
}

// startFailure is why a member's agent is not running, from its
// conditions: the latest condition that is False for a start failure.
func startFailure(m *fleetv1alpha1.Member) *StartFailure {
	var latest *StartFailure
	var at metav1.Time
	for _, t := range []string{fleetv1alpha1.ConditionReady, fleetv1alpha1.ConditionPaneReady, fleetv1alpha1.ConditionAgentReady, fleetv1alpha1.ConditionPodScheduled, fleetv1alpha1.ConditionHerdrReachable} {
		c := meta.FindStatusCondition(m.Status.Conditions, t)
		if c == nil || c.Status != metav1.ConditionFalse || !slices.Contains(startFailureReasons, c.Reason) {
			continue
		}
		if latest == nil || at.Before(&c.LastTransitionTime) {
			at = c.LastTransitionTime
			latest = &StartFailure{Condition: c.Type, Reason: c.Reason, Message: c.Message, Since: timeString(&c.LastTransitionTime)}
		}
	}
	return latest
}

func cliView(c agents.CLI) *CLIView {
	return &CLIView{Command: c.Command, Found: c.Found(), Path: c.Path, Version: c.Version, Error: c.Error}
}
