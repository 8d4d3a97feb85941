package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/sse"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// How a dashboard stream keeps itself honest and cheap.
const (
	// keepaliveInterval is how often an idle stream sends a comment, so
	// that proxies and the browser keep it open and a gone client is
	// noticed by the failed write.
	keepaliveInterval = 15 * time.Second
	// rescopeInterval is how often a stream resolves its token again: a
	// revoked token, a removed RoleBinding or a deleted member ends it
	// within this, and a review's reuse, of the change.
	rescopeInterval = 5 * time.Second
	// screenInterval is how often a member's terminal is read while a
	// page of it is open (herdr pushes no output stream), once for all its
	// pages; a change is pushed, an unchanged screen costs the browser
	// nothing.
	screenInterval = 100 * time.Millisecond
	// screenReadTimeout bounds one read of a terminal.
	screenReadTimeout = 2 * time.Second
	// streamWriteTimeout bounds one event's write: a client that stopped
	// reading ends its stream instead of holding a goroutine.
	streamWriteTimeout = 10 * time.Second
)

// eventStream writes a dashboard stream's server-sent events.
type eventStream struct {
	*sse.Writer
}

// startEventStream answers 200 with an event stream.
func startEventStream(w http.ResponseWriter) (*eventStream, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &eventStream{Writer: sse.NewWriter(w, streamWriteTimeout)}
	return s, s.Flush()
}

// send writes one event; data is v as JSON, which has no raw newline.
func (s *eventStream) send(event string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding a %s event: %w", event, err)
	}
	return s.Event(event, data)
}

// keepalive writes a comment.
func (s *eventStream) keepalive() error { return s.Keepalive() }

// dashboardStream is one open dashboard stream: the viewer's scope and
// registration, and what it last sent, so that only changes are sent.
type dashboardStream struct {
	d     *dashboard
	es    *eventStream
	v     *viewer
	token string
	// source is the client's address, which the stream's token checks
	// are throttled by.
	source string
	scope  *dashboardScope
	// sent holds a hash of the last row or message sent, by name.
	sent map[string]uint64
	// screen is the hash of the last screen sent.
	screen uint64
}

// scopeOf decides what p may see and do on the dashboard. Seeing
// anything takes what bridge_list takes (get members).
func (d *dashboard) scopeOf(ctx context.Context, p *identity.Principal) (*dashboardScope, error) {
	if err := d.svc.allow(ctx, p, identity.GetMembers); err != nil {
		return nil, err
	}
	s := &dashboardScope{who: p}
	if p.Member == nil {
		s.screens = d.svc.opts.Panes != nil || d.svc.opts.PaneHosts != nil
		s.othersMessages = d.svc.allow(ctx, p, identity.GetDelegations) == nil
		s.cancelOthers = d.svc.allow(ctx, p, identity.CancelDelegations) == nil
	}
	return s, nil
}

// openStream checks the caller, takes one of its stream slots,
// subscribes a viewer and starts the event stream with the hello event. A
// refusal is answered as every REST error is (401, 403, 429 for a caller
// with as many streams open as it may) before anything is streamed.
func (d *dashboard) openStream(w http.ResponseWriter, r *http.Request, member string) (*dashboardStream, func(), bool) {
	p := restPrincipal(r)
	scope, err := d.scopeOf(r.Context(), p)
	if err != nil {
		writeError(w, err)
		return nil, nil, false
	}
	release, ok := d.streams.reserve(p)
	if !ok {
		d.svc.metrics.throttled.WithLabelValues("dashboard_streams").Inc()
		writeError(w, toolerr.New(toolerr.Throttled, "you have %d dashboard streams open already, the most one caller may (--max-dashboard-streams); close a tab and try again", d.streams.max))
		return nil, nil, false
	}
	token, _ := identity.BearerToken(r)
	v := d.viewers.subscribe(p.Namespace, member)
	es, err := startEventStream(w)
	if err == nil {
		err = es.send("hello", scope.hello())
	}
	if err != nil {
		d.viewers.unsubscribe(v)
		release()
		return nil, nil, false
	}
	done := func() {
		release()
		d.viewers.unsubscribe(v)
		// The connection may serve another request after the stream.
		es.Done()
	}
	return &dashboardStream{d: d, es: es, v: v, token: token, source: clientAddress(r), scope: scope, sent: map[string]uint64{}}, done, true
}

// fleet serves GET /ui/api/fleet: every member the caller may see,
// then each change as it happens.
func (d *dashboard) fleet(w http.ResponseWriter, r *http.Request) {
	s, done, ok := d.openStream(w, r, "")
	if !ok {
		return
	}
	defer done()
	s.run(r.Context(), s.fleetSnapshot, s.fleetChanges, nil)
}

// memberPage serves GET /ui/api/members/{member}: the member, its
// messages and, for primaries, its terminal, then each change.
func (d *dashboard) memberPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("member")
	var m fleetv1alpha1.Member
	err := d.svc.cache.Get(r.Context(), types.NamespacedName{Namespace: restPrincipal(r).Namespace, Name: name}, &m)
	if err == nil && !(&dashboardScope{who: restPrincipal(r)}).showsMember(&m) {
		writeError(w, toolerr.New(toolerr.Forbidden, "member %s is not in your team; a member's dashboard shows its own team", name))
		return
	}
	if err != nil && !apierrors.IsNotFound(err) {
		writeError(w, err)
		return
	}
	s, done, ok := d.openStream(w, r, name)
	if !ok {
		return
	}
	defer done()
	var screen *screenWatch
	if s.scope.screens {
		screen = d.screens.watch(types.NamespacedName{Namespace: s.v.namespace, Name: name})
		defer d.screens.unwatch(screen)
	}
	s.run(r.Context(), s.memberSnapshot, s.memberChanges, screen)
}

// run sends the snapshot, then what changes, until the client leaves, the
// gateway stops, or the viewer may no longer see the page. Everything runs
// on the request's goroutine: when the request ends, nothing is left.
func (s *dashboardStream) run(ctx context.Context, snapshot func(context.Context) error, changes func(context.Context, viewerChanges) error, screen *screenWatch) {
	clk := s.d.svc.opts.Clock
	if err := snapshot(ctx); err != nil {
		s.fail(err)
		return
	}
	keepalive := clk.NewTicker(keepaliveInterval)
	defer keepalive.Stop()
	rescope := clk.NewTicker(rescopeInterval)
	defer rescope.Stop()
	var screens <-chan struct{}
	if screen != nil {
		screens = screen.wake
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-s.d.svc.stopping:
			return
		case <-s.v.wake:
			err = changes(ctx, s.v.take())
		case <-screens:
			err = s.sendScreen(screen.screen())
		case <-keepalive.C():
			err = s.es.keepalive()
		case <-rescope.C():
			var again bool
			if again, err = s.rescope(ctx); err == nil && again {
				err = snapshot(ctx)
			}
		}
		if err != nil {
			s.fail(err)
			return
		}
	}
}

// errStreamWrite marks a failed write: the client is gone, and there is
// nobody to tell.
var errStreamWrite = errors.New("writing to the dashboard stream")

// fail tells the viewer why its stream ends, unless the client is gone.
func (s *dashboardStream) fail(err error) {
	if errors.Is(err, errStreamWrite) || errors.Is(err, context.Canceled) {
		return
	}
	_ = s.es.send("error", errorBody{Error: toolerr.From(err)})
}

// send writes an event, marking a failed write.
func (s *dashboardStream) send(event string, v any) error {
	if err := s.es.send(event, v); err != nil {
		return fmt.Errorf("%w: %w", errStreamWrite, err)
	}
	return nil
}

// rescope resolves the stream's token again and reports whether what the
// viewer may see changed (a member moved to another team), which calls
// for a new snapshot. A token that no longer authenticates, or a principal
// that lost the right to see members, ends the stream.
func (s *dashboardStream) rescope(ctx context.Context) (bool, error) {
	p, f := s.d.svc.auth.AuthenticateFrom(ctx, s.token, s.source)
	if f != nil {
		return false, f.ToolError()
	}
	scope, err := s.d.scopeOf(ctx, p)
	if err != nil {
		return false, err
	}
	changed := scope.who.Team() != s.scope.who.Team() || scope.othersMessages != s.scope.othersMessages || scope.cancelOthers != s.scope.cancelOthers
	s.scope = scope
	if changed {
		clear(s.sent)
	}
	return changed, nil
}

// changedSince reports whether v differs from what was last sent as key,
// and records it.
func (s *dashboardStream) changedSince(key string, v any) bool {
	raw, err := json.Marshal(v)
	if err != nil {
		return true
	}
	h := fnv.New64a()
	_, _ = h.Write(raw)
	sum := h.Sum64()
	if old, ok := s.sent[key]; ok && old == sum {
		return false
	}
	s.sent[key] = sum
	return true
}

// profilesByName is the namespace's Profiles, for the agent they run and
// their warm pools.
func (s *dashboardStream) profilesByName(ctx context.Context) (map[string]*fleetv1alpha1.Profile, error) {
	ps, err := s.d.svc.profiles(ctx, s.v.namespace)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*fleetv1alpha1.Profile, len(ps))
	for i := range ps {
		byName[ps[i].Name] = &ps[i]
	}
	return byName, nil
}

// row shows m with its queue and the message in flight.
func (s *dashboardStream) row(ctx context.Context, m *fleetv1alpha1.Member, profiles map[string]*fleetv1alpha1.Profile) (DashboardMember, error) {
	q, err := s.d.svc.queueOf(ctx, m.Namespace, m.Name)
	if err != nil {
		return DashboardMember{}, err
	}
	var inFlight *fleetv1alpha1.Delegation
	if q.inFlight != "" {
		var d fleetv1alpha1.Delegation
		if err := s.d.svc.cache.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: q.inFlight}, &d); err == nil {
			inFlight = &d
		}
	}
	return dashboardMember(m, s.scope, q, inFlight, profiles), nil
}

// queues is what every member's queue holds, from one pass over the
// namespace's messages in the cache (without copies: they are only read):
// a snapshot of hundreds of members asks once, not twice per member.
func (s *dashboardStream) queues(ctx context.Context) (map[string]memberQueue, error) {
	var list fleetv1alpha1.DelegationList
	if err := s.d.svc.cache.List(ctx, &list, client.InNamespace(s.v.namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing messages in %s: %w", s.v.namespace, err)
	}
	return queuesOf(list.Items), nil
}

// memberKey, messageKey and poolKey name what was sent.
func memberKey(name string) string  { return "m/" + name }
func messageKey(name string) string { return "d/" + name }
func poolKey(name string) string    { return "p/" + name }

// fleetSnapshot sends every member the viewer sees, then the namespace's
// warm pools.
func (s *dashboardStream) fleetSnapshot(ctx context.Context) error {
	members, err := s.d.svc.members(ctx, s.v.namespace)
	if err != nil {
		return err
	}
	profiles, err := s.profilesByName(ctx)
	if err != nil {
		return err
	}
	queues, err := s.queues(ctx)
	if err != nil {
		return err
	}
	slices.SortFunc(members, func(a, b fleetv1alpha1.Member) int { return strings.Compare(a.Name, b.Name) })
	clear(s.sent)
	out := DashboardMembers{Reset: true, Members: make([]DashboardMember, 0, len(members))}
	for i := range members {
		m := &members[i]
		if !s.scope.showsMember(m) {
			continue
		}
		q := queues[m.Name]
		row := dashboardMember(m, s.scope, q.queue, q.current, profiles)
		s.changedSince(memberKey(m.Name), row)
		out.Members = append(out.Members, row)
	}
	if err := s.send("members", out); err != nil {
		return err
	}
	// Sent even when there is none: the reset clears the pools a client
	// showed before it reconnected.
	pools := DashboardPools{Reset: true, Pools: []DashboardPool{}}
	for _, name := range slices.Sorted(maps.Keys(profiles)) {
		if pool, ok := dashboardPool(profiles[name]); ok {
			s.changedSince(poolKey(name), pool)
			pools.Pools = append(pools.Pools, pool)
		}
	}
	return s.send("pools", pools)
}

// fleetChanges sends the rows of the members that changed, then the pools
// that changed.
func (s *dashboardStream) fleetChanges(ctx context.Context, changed viewerChanges) error {
	if changed.members.Len() > 0 {
		if err := s.memberRowChanges(ctx, changed.members); err != nil {
			return err
		}
	}
	if changed.pools.Len() > 0 {
		return s.poolChanges(ctx, changed.pools)
	}
	return nil
}

// memberRowChanges sends the rows of the named members that changed.
func (s *dashboardStream) memberRowChanges(ctx context.Context, names sets.Set[string]) error {
	profiles, err := s.profilesByName(ctx)
	if err != nil {
		return err
	}
	out := DashboardMembers{Members: []DashboardMember{}}
	for _, name := range sets.List(names) {
		row, shown, err := s.memberRow(ctx, name, profiles)
		if err != nil {
			return err
		}
		key := memberKey(name)
		switch {
		case !shown:
			if _, ok := s.sent[key]; ok {
				delete(s.sent, key)
				out.Removed = append(out.Removed, name)
			}
		case s.changedSince(key, row):
			out.Members = append(out.Members, row)
		}
	}
	if len(out.Members) == 0 && len(out.Removed) == 0 {
		return nil
	}
	return s.send("members", out)
}

// poolChanges sends the named Profiles' pools that changed, and says which
// are gone: a Profile deleted, or its pool taken out.
func (s *dashboardStream) poolChanges(ctx context.Context, names sets.Set[string]) error {
	out := DashboardPools{Pools: []DashboardPool{}}
	for _, name := range sets.List(names) {
		key := poolKey(name)
		var p fleetv1alpha1.Profile
		err := s.d.svc.cache.Get(ctx, types.NamespacedName{Namespace: s.v.namespace, Name: name}, &p)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading profile %s: %w", name, err)
		}
		pool, shown := DashboardPool{}, false
		if err == nil {
			pool, shown = dashboardPool(&p)
		}
		switch {
		case !shown:
			if _, ok := s.sent[key]; ok {
				delete(s.sent, key)
				out.Removed = append(out.Removed, name)
			}
		case s.changedSince(key, pool):
			out.Pools = append(out.Pools, pool)
		}
	}
	if len(out.Pools) == 0 && len(out.Removed) == 0 {
		return nil
	}
	return s.send("pools", out)
}

// memberRow reads one member from the cache; shown is false when it is gone
// or the viewer may not see it.
func (s *dashboardStream) memberRow(ctx context.Context, name string, profiles map[string]*fleetv1alpha1.Profile) (DashboardMember, bool, error) {
	var m fleetv1alpha1.Member
	switch err := s.d.svc.cache.Get(ctx, types.NamespacedName{Namespace: s.v.namespace, Name: name}, &m); {
	case apierrors.IsNotFound(err):
		return DashboardMember{}, false, nil
	case err != nil:
		return DashboardMember{}, false, fmt.Errorf("reading member %s: %w", name, err)
	}
	if !s.scope.showsMember(&m) {
		return DashboardMember{}, false, nil
	}
	row, err := s.row(ctx, &m, profiles)
	return row, err == nil, err
}

// memberSnapshot sends the member and its latest messages.
func (s *dashboardStream) memberSnapshot(ctx context.Context) error {
	clear(s.sent)
	if err := s.sendMember(ctx); err != nil {
		return err
	}
	// Messages made with kubectl carry no member label: every message of
	// the namespace is looked at, read from the cache without copies (the
	// views only read them).
	var list fleetv1alpha1.DelegationList
	if err := s.d.svc.cache.List(ctx, &list, client.InNamespace(s.v.namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing messages to %s: %w", s.v.member, err)
	}
	// Closed messages, which the cache may leave out, carry the member
	// label (the controller marks them): the API server has them.
	closed, err := s.d.svc.liveDelegationsTo(ctx, s.v.namespace, s.v.member, true)
	if err != nil {
		return err
	}
	out := DashboardMessages{Reset: true, Messages: []DashboardMessage{}}
	listed := sets.New[string]()
	for _, items := range [][]fleetv1alpha1.Delegation{list.Items, closed} {
		for i := range items {
			d := &items[i]
			if d.Spec.To == s.v.member && s.scope.showsMessage(d) && !listed.Has(d.Name) {
				listed.Insert(d.Name)
				out.Messages = append(out.Messages, dashboardMessage(d, s.scope))
			}
		}
	}
	out.Total = len(out.Messages)
	newestFirst(out.Messages)
	if len(out.Messages) > maxTimeline {
		out.Messages = out.Messages[:maxTimeline]
	}
	for _, m := range out.Messages {
		s.changedSince(messageKey(m.DispatchID), m)
	}
	return s.send("messages", out)
}

// sendMember sends the member when it changed.
func (s *dashboardStream) sendMember(ctx context.Context) error {
	profiles, err := s.profilesByName(ctx)
	if err != nil {
		return err
	}
	row, shown, err := s.memberRow(ctx, s.v.member, profiles)
	if err != nil {
		return err
	}
	page := DashboardMemberPage{Name: s.v.member}
	if shown {
		page.Member = &row
	}
	if !s.changedSince(memberKey(s.v.member), page) {
		return nil
	}
	return s.send("member", page)
}

// memberChanges sends the member and the messages that changed.
func (s *dashboardStream) memberChanges(ctx context.Context, changed viewerChanges) error {
	if changed.members.Has(s.v.member) {
		if err := s.sendMember(ctx); err != nil {
			return err
		}
	}
	out := DashboardMessages{Messages: []DashboardMessage{}}
	for _, name := range sets.List(changed.messages) {
		key := messageKey(name)
		// One the cache dropped may have closed: the API server says.
		d, err := s.d.svc.getDelegation(ctx, types.NamespacedName{Namespace: s.v.namespace, Name: name})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && !s.scope.showsMessage(d)):
			if _, ok := s.sent[key]; ok {
				delete(s.sent, key)
				out.Removed = append(out.Removed, name)
			}
		case err != nil:
			return fmt.Errorf("reading message %s: %w", name, err)
		default:
			if m := dashboardMessage(d, s.scope); s.changedSince(key, m) {
				out.Messages = append(out.Messages, m)
			}
		}
	}
	if len(out.Messages) == 0 && len(out.Removed) == 0 {
		return nil
	}
	newestFirst(out.Messages)
	return s.send("messages", out)
}

// sendScreen sends the member's terminal when it changed.
func (s *dashboardStream) sendScreen(screen DashboardScreen) error {
	h := fnv.New64a()
	_, _ = h.Write([]byte(screen.PaneID + "\x00" + screen.Text + "\x00" + screen.Unavailable))
	if sum := h.Sum64(); sum != s.screen || s.screen == 0 {
		s.screen = sum
		return s.send("screen", screen)
	}
	return nil
}
