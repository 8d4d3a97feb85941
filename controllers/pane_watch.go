package controllers

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

// PaneWatch is the one subscription manager between herdr and the Member
// controller. It follows the shared pane server's lifecycle events and
// each tracked pane's agent status changes, on whichever pane host the pane
// lives (the shared one, or a pod member's own), and turns them into
// reconcile requests for the Members they concern, through a channel
// source. The streams reconnect and resync on their own; every resync
// requests a reconcile, so nothing that happened while herdr was away goes
// unnoticed.
type PaneWatch struct {
	// panes is the shared pane server; nil when fleetd has none.
	panes    PaneClient
	requests chan event.TypedGenericEvent[client.Object]

	mu      sync.Mutex
	ctx     context.Context
	byPane  map[paneRef]types.NamespacedName
	tracked map[types.NamespacedName]*paneStream
	// sawWorking holds the Members herdr reported working or blocked
	// since their last look (TakeSawWorking), and those whose pane went
	// unwatched for a while (a stream that (re)subscribed).
	sawWorking map[types.NamespacedName]bool
}

// paneRef names a pane on a pane host: pane ids are only unique per host.
type paneRef struct{ host, paneID string }

type paneStream struct {
	paneID string
	panes  PaneClient
	cancel context.CancelFunc
	// ended is closed once herdr ended the stream: it rejects a
	// subscription to a pane it does not have, which is what a reconnect
	// after a herdr restart finds until the pane is recreated.
	ended chan struct{}
}

// running says whether the stream still follows its pane. One not started
// yet (PaneWatch not running) counts as running: Start starts it.
func (s *paneStream) running() bool {
	if s.ended == nil {
		return true
	}
	select {
	case <-s.ended:
		return false
	default:
		return true
	}
}

// NewPaneWatch returns a PaneWatch reading from panes. Add it to the
// manager and hand Source to the controller.
func NewPaneWatch(panes PaneClient) *PaneWatch {
	return &PaneWatch{
		panes:      panes,
		requests:   make(chan event.TypedGenericEvent[client.Object], 1024),
		byPane:     map[paneRef]types.NamespacedName{},
		tracked:    map[types.NamespacedName]*paneStream{},
		sawWorking: map[types.NamespacedName]bool{},
	}
}

// Source is the controller's view of herdr's events.
func (p *PaneWatch) Source() source.Source {
	return source.Channel(p.requests, &handler.EnqueueRequestForObject{})
}

// NeedLeaderElection ties the streams to the controllers they feed.
func (p *PaneWatch) NeedLeaderElection() bool { return true }

// Start follows herdr's lifecycle events until ctx ends, and starts the
// per-pane streams tracked before it ran.
func (p *PaneWatch) Start(ctx context.Context) error {
	p.mu.Lock()
	p.ctx = ctx
	for key, s := range p.tracked {
		p.startLocked(key, s)
	}
	p.mu.Unlock()

	if p.panes == nil {
		// No shared pane server: only pod members' panes, whose streams
		// and Pods tell the controller what happens.
		<-ctx.Done()
		return nil
	}
	go p.probe(ctx)
	stream := p.panes.Subscribe(ctx, []herdr.Subscription{
		herdr.Lifecycle(herdr.SubscribePaneClosed),
		herdr.Lifecycle(herdr.SubscribePaneExited),
		herdr.Lifecycle(herdr.SubscribeWorkspaceClosed),
	})
	defer stream.Close()
	for ev := range stream.Events() {
		if ev.Kind == herdr.EventResync {
			p.requestAll(ctx)
			continue
		}
		p.requestPane(ctx, paneRef{socketOf(p.panes), ev.Data.PaneID}, ev.Data.WorkspaceID)
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// probeInterval is how often PaneWatch checks that herdr still answers. A
// lost connection produces no event, so without the probe nobody would notice
// herdr going away until the next resync.
const probeInterval = 2 * time.Second

// probe requests a reconcile of every tracked Member whenever herdr stops or
// starts answering.
func (p *PaneWatch) probe(ctx context.Context) {
	reachable := true
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, probeInterval)
		_, err := p.panes.Ping(pctx)
		cancel()
		if now := err == nil; now != reachable {
			reachable = now
			p.requestAll(ctx)
		}
	}
}

// Track follows the agent status of key's pane on the pane host panes. A
// new pane id or host replaces the stream of the old one, and a stream
// herdr ended is started again: herdr reuses pane ids after a restart, so
// the same id may name a new pane.
func (p *PaneWatch) Track(key types.NamespacedName, paneID string, panes PaneClient) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.tracked[key]; ok {
		if s.paneID == paneID && s.panes == panes && s.running() {
			return
		}
		p.stopLocked(key, s)
	}
	s := &paneStream{paneID: paneID, panes: panes}
	p.tracked[key] = s
	p.byPane[paneRef{socketOf(panes), paneID}] = key
	if p.ctx != nil {
		p.startLocked(key, s)
	}
}

// TakeSawWorking says whether herdr reported key's agent working or
// blocked since the last call: a turn may begin and end between two looks
// at the agent, and its pickup must still show.
func (p *PaneWatch) TakeSawWorking(key types.NamespacedName) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	saw := p.sawWorking[key]
	delete(p.sawWorking, key)
	return saw
}

// GiveBackSawWorking marks key's agent as seen working since the last
// look: herdr said so, or nobody watched, or a look that took the mark
// could not record what it saw.
func (p *PaneWatch) GiveBackSawWorking(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sawWorking[key] = true
}

// Forget stops following key's pane.
func (p *PaneWatch) Forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.tracked[key]; ok {
		p.stopLocked(key, s)
	}
	delete(p.sawWorking, key)
}

func (p *PaneWatch) startLocked(key types.NamespacedName, s *paneStream) {
	ctx, cancel := context.WithCancel(p.ctx)
	s.cancel, s.ended = cancel, make(chan struct{})
	stream := s.panes.Subscribe(ctx, []herdr.Subscription{herdr.PaneAgentStatusChanged(s.paneID)})
	go func() {
		defer stream.Close()
		for ev := range stream.Events() {
			// A (re)subscription follows a time nobody watched: the
			// agent may have worked meanwhile.
			if ev.Kind == herdr.EventResync || ev.Data.AgentStatus == herdr.AgentStatusWorking || ev.Data.AgentStatus == herdr.AgentStatusBlocked {
				p.GiveBackSawWorking(key)
			}
			p.request(ctx, key)
		}
		// A stream herdr ended (e.g. its pane is gone) is worth a look; the
		// look's Track must see it ended, so close first.
		close(s.ended)
		p.request(ctx, key)
	}()
}

func (p *PaneWatch) stopLocked(key types.NamespacedName, s *paneStream) {
	if s.cancel != nil {
		s.cancel()
	}
	delete(p.tracked, key)
	ref := paneRef{socketOf(s.panes), s.paneID}
	if p.byPane[ref] == key {
		delete(p.byPane, ref)
	}
}

func (p *PaneWatch) requestPane(ctx context.Context, ref paneRef, workspaceID string) {
	p.mu.Lock()
	key, ok := p.byPane[ref]
	var keys []types.NamespacedName
	if !ok && ref.paneID == "" && workspaceID != "" {
		// A closed workspace names no pane: look at everyone tracked in it.
		for k := range p.tracked {
			keys = append(keys, k)
		}
	}
	p.mu.Unlock()
	if ok {
		p.request(ctx, key)
	}
	for _, k := range keys {
		p.request(ctx, k)
	}
}

func (p *PaneWatch) requestAll(ctx context.Context) {
	p.mu.Lock()
	keys := make([]types.NamespacedName, 0, len(p.tracked))
	for k := range p.tracked {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	for _, k := range keys {
		p.request(ctx, k)
	}
}

func (p *PaneWatch) request(ctx context.Context, key types.NamespacedName) {
	m := &fleetv1alpha1.Member{}
	m.Name, m.Namespace = key.Name, key.Namespace
	select {
	case p.requests <- event.TypedGenericEvent[client.Object]{Object: m}:
	case <-ctx.Done():
	}
}
