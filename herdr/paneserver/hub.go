package paneserver

import (
	"encoding/json"
	"regexp"
	"strings"
	"sync"

	"github.com/fleetd/fleetd/herdr"
)

// subscriberQueue is how many event lines wait for a subscriber. A
// subscriber that falls this far behind is dropped; a herdr client then
// reconnects and resyncs.
const subscriberQueue = 1024

// hub fans events out to subscribers. publish never blocks.
type hub struct {
	mu   sync.Mutex
	subs map[*subscriber]struct{}
}

func newHub() *hub {
	return &hub{subs: map[*subscriber]struct{}{}}
}

func (h *hub) add(sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[sub] = struct{}{}
}

func (h *hub) remove(sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, sub)
}

func (h *hub) publish(ev herdr.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var line []byte
	for sub := range h.subs {
		if !sub.wants(ev) {
			continue
		}
		if line == nil {
			var err error
			if line, err = eventLine(ev); err != nil {
				return
			}
		}
		sub.push(line)
	}
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

// subscriber is one events.subscribe connection.
type subscriber struct {
	// kinds are the lifecycle events wanted.
	kinds map[herdr.EventKind]bool
	// statuses maps pane ids to status filters; a nil filter takes any status.
	statuses map[string][]*herdr.AgentStatus
	outputs  []*outputWatch

	queue    chan []byte
	overflow chan struct{}
	once     sync.Once
}

func newSubscriber() *subscriber {
	return &subscriber{
		kinds:    map[herdr.EventKind]bool{},
		statuses: map[string][]*herdr.AgentStatus{},
		queue:    make(chan []byte, subscriberQueue),
		overflow: make(chan struct{}),
	}
}

func (sub *subscriber) wants(ev herdr.Event) bool {
	if ev.Kind != herdr.EventPaneAgentStatusChanged {
		return sub.kinds[ev.Kind]
	}
	for _, want := range sub.statuses[ev.Data.PaneID] {
		if want == nil || *want == ev.Data.AgentStatus {
			return true
		}
	}
	return false
}

func (sub *subscriber) push(line []byte) {
	select {
	case sub.queue <- line:
	default:
		sub.once.Do(func() { close(sub.overflow) })
	}
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
// live panes. A status subscription narrowed to the pane's current status
// gets that status as its first event, as herdr does.
func (s *session) subscribe(subs []herdr.Subscription) (*subscriber, *herdr.Error) {
	sub := newSubscriber()
	s.mu.Lock()
	defer s.mu.Unlock()
	var initial []herdr.Event
	for _, want := range subs {
		switch want.Type {
		case herdr.SubscribePaneAgentStatusChanged:
			p := s.panes[want.PaneID]
			if p == nil {
				return nil, errorf(herdr.CodePaneNotFound, "pane %s not found", want.PaneID)
			}
			sub.statuses[p.id] = append(sub.statuses[p.id], want.AgentStatus)
			if want.AgentStatus != nil && *want.AgentStatus == p.agent.status {
				initial = append(initial, herdr.Event{Kind: herdr.EventPaneAgentStatusChanged, Data: herdr.EventData{
					PaneID: p.id, WorkspaceID: p.ws.id, AgentStatus: p.agent.status, Agent: optional(p.agent.label),
				}})
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
			sub.kinds[lifecycleKind(want.Type)] = true
		}
	}
	s.hub.add(sub)
	for _, ev := range initial {
		if line, err := eventLine(ev); err == nil {
			sub.push(line)
		}
	}
	return sub, nil
}
