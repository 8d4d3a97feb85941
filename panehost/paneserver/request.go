package paneserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fleetd/fleetd/herdr"
)

// request is a decoded request whose params are typed and validated.
type request struct {
	id     string
	method string
	params any
}

// method decodes and serves one API method.
type method struct {
	decode func(raw json.RawMessage) (any, error)
	// held reports whether the call holds the connection open, so that a
	// byte or half-close from the client cancels it.
	held  func(params any) bool
	serve func(s *Server, ctx context.Context, params any) (any, *herdr.Error)
}

// newMethod builds a method from typed parts: the params' required fields,
// a check of what JSON cannot express (enums, ranges), and the handler.
func newMethod[P any](required []string, check func(*P) error, serve func(*Server, context.Context, P) (any, *herdr.Error)) method {
	m := method{
		decode: func(raw json.RawMessage) (any, error) {
			return decodeParams(raw, required, check)
		},
		held: func(any) bool { return false },
	}
	if serve != nil {
		m.serve = func(s *Server, ctx context.Context, params any) (any, *herdr.Error) {
			return serve(s, ctx, params.(P))
		}
	}
	return m
}

// methods are the calls this server answers. events.subscribe is decoded
// here and streamed by the connection handler.
var methods = map[string]method{
	herdr.MethodPing:                    newMethod(nil, nil, (*Server).ping),
	herdr.MethodSessionSnapshot:         newMethod(nil, nil, (*Server).sessionSnapshot),
	herdr.MethodWorkspaceCreate:         newMethod(nil, nil, (*Server).workspaceCreate),
	herdr.MethodWorkspaceClose:          newMethod([]string{"workspace_id"}, nil, (*Server).workspaceClose),
	herdr.MethodWorkspaceRename:         newMethod([]string{"workspace_id", "label"}, nil, (*Server).workspaceRename),
	herdr.MethodAgentRename:             newMethod([]string{"target"}, nil, (*Server).agentRename),
	herdr.MethodTabCreate:               newMethod(nil, nil, (*Server).tabCreate),
	herdr.MethodAgentStart:              newMethod([]string{"name", "kind", "pane_id"}, nil, (*Server).agentStart),
	herdr.MethodAgentGet:                newMethod([]string{"target"}, nil, (*Server).agentGet),
	herdr.MethodAgentList:               newMethod(nil, nil, (*Server).agentList),
	herdr.MethodAgentRead:               newMethod([]string{"target", "source"}, checkRead, (*Server).agentRead),
	herdr.MethodPaneRead:                newMethod([]string{"pane_id", "source"}, checkRead, (*Server).paneRead),
	herdr.MethodAgentPrompt:             heldWhen(newMethod([]string{"target", "text"}, checkPrompt, (*Server).agentPrompt), promptWaits),
	herdr.MethodAgentWait:               heldWhen(newMethod([]string{"target"}, checkWait, (*Server).agentWaitCall), always),
	herdr.MethodPaneSendInput:           newMethod([]string{"pane_id"}, nil, (*Server).paneSendInput),
	herdr.MethodPaneSendKeys:            newMethod([]string{"pane_id", "keys"}, nil, (*Server).paneSendKeys),
	herdr.MethodPaneReportAgent:         newMethod([]string{"pane_id", "source", "agent", "state"}, checkReport, (*Server).paneReportAgent),
	herdr.MethodPaneReleaseAgent:        newMethod([]string{"pane_id", "source", "agent"}, nil, (*Server).paneReleaseAgent),
	herdr.MethodPaneClearAgentAuthority: newMethod([]string{"pane_id"}, nil, (*Server).paneClearAgentAuthority),
	herdr.MethodPaneClose:               newMethod([]string{"pane_id"}, nil, (*Server).paneClose),
	herdr.MethodEventsSubscribe:         newMethod([]string{"subscriptions"}, checkSubscribe, nil),
}

func heldWhen(m method, held func(any) bool) method {
	m.held = held
	return m
}

func always(any) bool { return true }

func promptWaits(params any) bool {
	return params.(herdr.AgentPromptParams).Wait != nil
}

// decodeRequest decodes a request line. Any failure is herdr's
// invalid_request, answered with an empty id. An extension's params stay
// raw: the extension decodes them.
func decodeRequest(line []byte, extensions map[string]Extension) (request, *herdr.Error) {
	var frame struct {
		ID     *string         `json:"id"`
		Method *string         `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(line, &frame); err != nil {
		return request{}, invalidRequest("%v", err)
	}
	if frame.ID == nil {
		return request{}, invalidRequest("missing field `id`")
	}
	if frame.Method == nil {
		return request{}, invalidRequest("missing field `method`")
	}
	m, ok := methods[*frame.Method]
	if _, ext := extensions[*frame.Method]; ext && !ok {
		return request{id: *frame.ID, method: *frame.Method, params: frame.Params}, nil
	}
	if !ok {
		return request{}, invalidRequest("unknown method %q", *frame.Method)
	}
	params, err := m.decode(frame.Params)
	if err != nil {
		return request{}, invalidRequest("%s params: %v", *frame.Method, err)
	}
	return request{id: *frame.ID, method: *frame.Method, params: params}, nil
}

func invalidRequest(format string, args ...any) *herdr.Error {
	return errorf(herdr.CodeInvalidRequest, "invalid request: "+format, args...)
}

// decodeParams decodes params into P. Absent params count as {}.
func decodeParams[P any](raw json.RawMessage, required []string, check func(*P) error) (P, error) {
	var p P
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return p, fmt.Errorf("params must be an object: %w", err)
	}
	for _, name := range required {
		if v, ok := fields[name]; !ok || bytes.Equal(v, []byte("null")) {
			return p, fmt.Errorf("missing field `%s`", name)
		}
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, err
	}
	if check != nil {
		if err := check(&p); err != nil {
			return p, err
		}
	}
	return p, nil
}

func checkRead(p *herdr.ReadParams) error {
	switch {
	case !p.Source.Valid():
		return fmt.Errorf("unknown read source %q", p.Source)
	case p.Format != "" && !p.Format.Valid():
		return fmt.Errorf("unknown read format %q", p.Format)
	case p.Lines != nil && *p.Lines < 0:
		return errors.New("lines must not be negative")
	}
	return nil
}

func checkStatuses(list []herdr.AgentStatus) error {
	for _, s := range list {
		if !s.Valid() {
			return fmt.Errorf("unknown agent status %q", s)
		}
	}
	return nil
}

func checkPrompt(p *herdr.AgentPromptParams) error {
	if p.Wait == nil {
		return nil
	}
	return checkStatuses(p.Wait.Until)
}

func checkWait(p *herdr.AgentWaitParams) error {
	return checkStatuses(p.Until)
}

func checkReport(p *herdr.PaneReportAgentParams) error {
	if !p.State.Valid() {
		return fmt.Errorf("unknown agent state %q", p.State)
	}
	return nil
}

// subscribeScrollChanged is accepted, as herdr does, but never fires here.
const subscribeScrollChanged herdr.SubscriptionType = "pane.scroll_changed"

// lifecycleSubscriptions are the unfiltered subscription types herdr knows.
var lifecycleSubscriptions = map[herdr.SubscriptionType]bool{
	"workspace.created": true, "workspace.updated": true, "workspace.metadata_updated": true,
	"workspace.renamed": true, "workspace.moved": true, "workspace.reordered": true,
	"workspace.closed": true, "workspace.focused": true, "worktree.created": true,
	"worktree.opened": true, "worktree.removed": true, "tab.created": true,
	"tab.closed": true, "tab.focused": true, "tab.renamed": true, "tab.moved": true,
	"pane.created": true, "pane.closed": true, "pane.updated": true, "pane.focused": true,
	"pane.moved": true, "pane.exited": true, "pane.agent_detected": true, "layout.updated": true,
}

func checkSubscribe(p *herdr.EventsSubscribeParams) error {
	for i, sub := range p.Subscriptions {
		if err := checkSubscription(sub); err != nil {
			return fmt.Errorf("subscriptions[%d]: %w", i, err)
		}
	}
	return nil
}

func checkSubscription(sub herdr.Subscription) error {
	switch sub.Type {
	case herdr.SubscribePaneAgentStatusChanged:
		if sub.AgentStatus != nil && !sub.AgentStatus.Valid() {
			return fmt.Errorf("unknown agent status %q", *sub.AgentStatus)
		}
	case herdr.SubscribePaneOutputMatched:
		switch {
		case sub.Source == "":
			return errors.New("missing field `source`")
		case !sub.Source.Valid():
			return fmt.Errorf("unknown read source %q", sub.Source)
		case sub.Match == nil:
			return errors.New("missing field `match`")
		case sub.Match.Type != herdr.OutputMatchSubstring && sub.Match.Type != herdr.OutputMatchRegex:
			return fmt.Errorf("unknown match type %q", sub.Match.Type)
		case sub.Lines != nil && *sub.Lines < 0:
			return errors.New("lines must not be negative")
		}
	case subscribeScrollChanged:
	default:
		if !lifecycleSubscriptions[sub.Type] {
			return fmt.Errorf("unknown subscription type %q", sub.Type)
		}
		return nil
	}
	if sub.PaneID == "" {
		return errors.New("missing field `pane_id`")
	}
	return nil
}
