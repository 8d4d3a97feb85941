package gateway

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

var (
	t0       = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	staticP  = &identity.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary", Namespace: "ns"}
	memberOf = func(m *fleetv1alpha1.Member) *identity.Principal {
		return &identity.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: m.Name, Namespace: m.Namespace, Member: m}
	}
	codeOf    = func(e *toolerr.Error) toolerr.Code { return ptr.Deref(e, toolerr.Error{}).Code }
	mtime     = func(d time.Duration) *metav1.Time { return ptr.To(metav1.NewTime(t0.Add(d))) }
	withState = func(m *fleetv1alpha1.Member, pane, terminal, session string) fleetv1alpha1.Member {
		m.Status.PaneID, m.Status.TerminalID, m.Status.AgentSessionID = pane, terminal, session
		return *m
	}
)
