package paneserver

import (
	"cmp"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/fleetd/fleetd/herdr"
)

// retainedEvents is how many events herdr keeps, of every kind together:
// a new lifecycle subscription is replayed what is still among them.
const retainedEvents = 512

// hub keeps the latest events, as herdr's event hub does, and wakes the
// streams that follow it. publish never blocks.
type hub struct {
	mu       sync.Mutex
	seq      uint64
	retained []retainedEvent
	wake     chan struct{}
}

// retainedEvent is one event with its place in the hub's order.
type retainedEvent struct {
	seq  uint64
	ev   herdr.Event
	line []byte
}

func newHub() *hub {
	return &hub{wake: make(chan struct{})}
}

func (h *hub) publish(ev herdr.Event) {
	line, err := eventLine(ev)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	if len(h.retained) == retainedEvents {
		copy(h.retained, h.retained[1:])
		h.retained = h.retained[:retainedEvents-1]
	}
	h.retained = append(h.retained, retainedEvent{seq: h.seq, ev: ev, line: line})
	close(h.wake)
	h.wake = make(chan struct{})
}

// now returns the latest event's seq and a channel closed by the next
// publish.
func (h *hub) now() (uint64, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq, h.wake
}

// next returns the first retained event after c that c wants, and moves c
// past it; without one, c moves past everything retained.
func (h *hub) next(c *cursor) ([]byte, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i, _ := slices.BinarySearchFunc(h.retained, c.after+1, func(r retainedEvent, seq uint64) int {
		return cmp.Compare(r.seq, seq)
	})
	for ; i < len(h.retained); i++ {
		r := &h.retained[i]
		c.after = r.seq
		if c.wants(r.ev) {
			return r.line, true
		}
	}
	return nil, false
}

// eventLine encodes an event as a line. Lines are shared between
// subscribers, so they are never appended to.
func eventLine(ev herdr.Event) ([]byte, error) {
	line, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	return append(line, '\n'), nil
}

// cursor is one subscription of an events.subscribe: what it wants and how
// far through the hub it has read.
type cursor struct {
	kind herdr.EventKind
	// paneID and status narrow pane.agent_status_changed.
	paneID string
	status *herdr.AgentStatus
	after  uint64
}

func (c *cursor) wants(ev herdr.Event) bool {
	if ev.Kind != c.kind {
		return false
	}
	if c.kind != herdr.EventPaneAgentStatusChanged {
		return true
	}
	return ev.Data.PaneID == c.paneID && (c.status == nil || *c.status == ev.Data.AgentStatus)
}

// subscriber is one events.subscribe connection.
type subscriber struct {
	cursors []*cursor
	outputs []*outputWatch
	// initial are lines sent right after the subscription starts.
	initial [][]byte
}

// lifecycleKind maps a lifecycle subscription type to the event it receives:
// "pane.closed" receives "pane_closed".
func lifecycleKind(t herdr.SubscriptionType) herdr.EventKind {
	return herdr.EventKind(strings.ReplaceAll(string(t), ".", "_"))
}

// outputWatch is a pane.output_matched subscription. It fires when a line
// starts matching, not again while it keeps matching.
type outputWatch struct {
	paneID   string
	source   herdr.ReadSource
	lines    *int
	match    func(line string) bool
	matching bool
}

func newOutputWatch(sub herdr.Subscription) (*outputWatch, *herdr.Error) {
	w := &outputWatch{paneID: sub.PaneID, source: sub.Source, lines: sub.Lines}
	// herdr matches logical lines: wrapping must not split a pattern.
	if w.source == herdr.ReadSourceRecent {
		w.source = herdr.ReadSourceRecentUnwrapped
	}
	value := sub.Match.Value
	switch sub.Match.Type {
	case herdr.OutputMatchRegex:
		re, err := regexp.Compile(value)
		if err != nil {
			return nil, errorf(herdr.CodeInvalidRegex, "%v", err)
		}
		w.match = re.MatchString
	default:
		w.match = func(line string) bool { return strings.Contains(line, value) }
	}
	return w, nil
}

// poll reads the pane and returns an event when the output starts matching.
func (w *outputWatch) poll(s *session) (herdr.Event, bool) {
	read, err := s.readPane(w.paneID, w.source, w.lines)
	if err != nil {
		return herdr.Event{}, false
	}
	for line := range strings.SplitSeq(read.Text, "\n") {
		if !w.match(line) {
			continue
		}
		if w.matching {
			return herdr.Event{}, false
		}
		w.matching = true
		return herdr.Event{Kind: herdr.EventPaneOutputMatched, Data: herdr.EventData{
			PaneID:      w.paneID,
			MatchedLine: &line,
			Read:        read,
		}}, true
	}
	w.matching = false
	return herdr.Event{}, false
}

// subscribe registers a subscriber for subs. Filtered subscriptions must name
// live panes. Lifecycle subscriptions start from the oldest retained event,
// as herdr replays them; filtered ones start now. A status subscription
// narrowed to the pane's current status gets that status as its first
// event, as herdr does.
func (s *session) subscribe(subs []herdr.Subscription) (*subscriber, *herdr.Error) {
	sub := &subscriber{}
	s.mu.Lock()
	defer s.mu.Unlock()
	now, _ := s.hub.now()
	for _, want := range subs {
		switch want.Type {
		case herdr.SubscribePaneAgentStatusChanged:
			p := s.panes[want.PaneID]
			if p == nil {
				return nil, errorf(herdr.CodePaneNotFound, "pane %s not found", want.PaneID)
			}
			sub.cursors = append(sub.cursors, &cursor{kind: herdr.EventPaneAgentStatusChanged, paneID: p.id, status: want.AgentStatus, after: now})
			if want.AgentStatus != nil && *want.AgentStatus == p.agent.status {
				line, err := eventLine(herdr.Event{Kind: herdr.EventPaneAgentStatusChanged, Data: herdr.EventData{
					PaneID: p.id, WorkspaceID: p.ws.id, AgentStatus: p.agent.status, Agent: optional(p.agent.label),
				}})
				if err == nil {
					sub.initial = append(sub.initial, line)
				}
			}
		case herdr.SubscribePaneOutputMatched:
			if s.panes[want.PaneID] == nil {
				return nil, errorf(herdr.CodePaneNotFound, "pane %s not found", want.PaneID)
			}
			w, err := newOutputWatch(want)
			if err != nil {
				return nil, err
			}
			sub.outputs = append(sub.outputs, w)
		case subscribeScrollChanged:
			// Headless panes never scroll; the subscription stays silent.
			if s.panes[want.PaneID] == nil {
				return nil, errorf(herdr.CodePaneNotFound, "pane %s not found", want.PaneID)
			}
		default:
			sub.cursors = append(sub.cursors, &cursor{kind: lifecycleKind(want.Type)})
		}
	}
	return sub, nil
}
