package controllers

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/herdr/detect"
)

// DefaultScreenInterval is how often a watched pane's screen is read.
const DefaultScreenInterval = 500 * time.Millisecond

// ScreenWatch reads the screens of agents fleetd has screen rules for, for
// what no hook reports: a dialog (blocked, with its text), the end of a
// dialog, and a turn that ended without its end being reported. What the
// screen shows, herdr is told under fleetd's own source, so herdr (which
// refuses prompts into a blocked agent) and the Member agree. A change of
// dialog asks for a reconcile of its Member, which shows the text.
type ScreenWatch struct {
	detectors map[string]*detect.Detector
	interval  time.Duration
	clock     clock.PassiveClock
	log       logr.Logger
	requests  chan event.TypedGenericEvent[client.Object]

	mu      sync.Mutex
	watched map[types.NamespacedName]*watchedScreen
}

type watchedScreen struct {
	paneID string
	// panes is the pane host the pane lives on.
	panes PaneClient
	kind  string
	track screenTrack
}

// NewScreenWatch returns a ScreenWatch for the agents detectors has rules
// for. Add it to the manager and hand Source to the Member controller.
func NewScreenWatch(detectors map[string]*detect.Detector, interval time.Duration, c clock.PassiveClock) *ScreenWatch {
	if interval <= 0 {
		interval = DefaultScreenInterval
	}
	return &ScreenWatch{
		detectors: detectors, interval: interval, clock: c,
		requests: make(chan event.TypedGenericEvent[client.Object], 1024),
		watched:  map[types.NamespacedName]*watchedScreen{},
	}
}

// Source is the Member controller's view of dialogs appearing and going.
func (w *ScreenWatch) Source() source.Source {
	return source.Channel(w.requests, &handler.EnqueueRequestForObject{})
}

// NeedLeaderElection ties the watch to the controllers it feeds.
func (w *ScreenWatch) NeedLeaderElection() bool { return true }

// Watches reports whether w reads the screens of an agent kind.
func (w *ScreenWatch) Watches(kind fleetv1alpha1.AgentKind) bool {
	return w != nil && w.detectors[string(kind)] != nil
}

// Watch reads key's pane on the pane host panes from now on; a new pane id
// or host starts afresh.
func (w *ScreenWatch) Watch(key types.NamespacedName, paneID string, kind fleetv1alpha1.AgentKind, panes PaneClient) {
	if !w.Watches(kind) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.watched[key]; ok && s.paneID == paneID && s.panes == panes {
		return
	}
	w.watched[key] = &watchedScreen{paneID: paneID, panes: panes, kind: string(kind)}
}

// Forget stops reading key's pane.
func (w *ScreenWatch) Forget(key types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.watched, key)
}

// Dialog is the dialog last seen on key's screen, "" for none.
func (w *ScreenWatch) Dialog(key types.NamespacedName) string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.watched[key]; ok {
		return s.track.dialog
	}
	return ""
}

// Start reads every watched screen each interval until ctx ends.
func (w *ScreenWatch) Start(ctx context.Context) error {
	w.log = logr.FromContextOrDiscard(ctx).WithName("screen")
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		w.mu.Lock()
		keys := make([]types.NamespacedName, 0, len(w.watched))
		for k := range w.watched {
			keys = append(keys, k)
		}
		w.mu.Unlock()
		for _, k := range keys {
			w.look(ctx, k)
		}
	}
}

// look takes one sample of key's screen and acts on it.
func (w *ScreenWatch) look(ctx context.Context, key types.NamespacedName) {
	w.mu.Lock()
	s, ok := w.watched[key]
	if !ok {
		w.mu.Unlock()
		return
	}
	paneID, kind, track, panes := s.paneID, s.kind, s.track, s.panes
	w.mu.Unlock()

	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	info, err := panes.AgentGet(hctx, paneID)
	if err != nil {
		return
	}
	read, err := panes.PaneRead(hctx, herdr.ReadParams{PaneID: paneID, Source: herdr.ReadSourceDetection})
	if err != nil {
		return
	}
	title := ""
	if info.TerminalTitle != nil {
		title = *info.TerminalTitle
	}
	verdict := w.detectors[kind].Detect(detect.Screen{Text: read.Text, Title: title})
	next, report := judgeScreen(track, screenSample{status: info.AgentStatus, seq: info.StateChangeSeq, verdict: verdict, at: w.clock.Now()})

	w.mu.Lock()
	cur, ok := w.watched[key]
	if !ok || cur.paneID != paneID {
		w.mu.Unlock()
		return
	}
	dialogChanged := cur.track.dialog != next.dialog
	cur.track = next
	w.mu.Unlock()

	if report != nil {
		seq := uint64(report.observedAt.UnixMicro())
		p := herdr.PaneReportAgentParams{PaneID: paneID, Source: agents.ReportSource, Agent: kind, State: report.state, Seq: &seq}
		if report.message != "" {
			p.Message = &report.message
		}
		if err := panes.PaneReportAgent(hctx, p); err != nil {
			w.log.Error(err, "Reporting what the screen shows", "member", key, "state", report.state)
		} else {
			w.log.V(1).Info("The screen overruled herdr's status", "member", key, "state", report.state, "rule", verdict.Rule)
		}
	}
	if dialogChanged || report != nil {
		m := &fleetv1alpha1.Member{}
		m.Name, m.Namespace = key.Name, key.Namespace
		select {
		case w.requests <- event.TypedGenericEvent[client.Object]{Object: m}:
		case <-ctx.Done():
		}
	}
}
