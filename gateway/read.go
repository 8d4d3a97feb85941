package gateway

import (
	"context"
	"errors"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/textcut"
)

// Bounds of bridge_read.
const (
	defaultReadLines = 80
	maxReadLines     = 1000
	// maxReadBytes keeps a read within what a model's context takes
	// gladly; the end of the text is kept.
	maxReadBytes = 64 << 10
)

// read shows a member's terminal text, through herdr's pane.read,
// with every escape sequence and control removed.
func (s *service) read(ctx context.Context, c *call, in ReadInput) (*ReadOutput, error) {
	if c.who.Member != nil {
		return nil, toolerr.New(toolerr.Forbidden, "bridge_read is for primaries; a member sees its own terminal")
	}
	if err := s.allow(ctx, c.who, identity.GetMembers); err != nil {
		return nil, err
	}
	if s.opts.Panes == nil && s.opts.PaneHosts == nil {
		return nil, toolerr.New(toolerr.FeatureDisabled, "this gateway has no herdr connection to read terminals with")
	}
	source := herdr.ReadSource(in.Source)
	switch source {
	case "":
		source = herdr.ReadSourceRecent
	case herdr.ReadSourceVisible, herdr.ReadSourceRecent, herdr.ReadSourceRecentUnwrapped, herdr.ReadSourceDetection:
	default:
		return nil, toolerr.New(toolerr.InvalidArgument, "source must be visible, recent, recent_unwrapped or detection, not %q", in.Source)
	}
	lines := defaultReadLines
	if in.Lines != nil {
		if *in.Lines < 1 || *in.Lines > maxReadLines {
			return nil, toolerr.New(toolerr.InvalidArgument, "lines must be from 1 to %d, got %d", maxReadLines, *in.Lines)
		}
		lines = *in.Lines
	}
	if in.SessionID == "" {
		return nil, toolerr.New(toolerr.InvalidArgument, "sessionId must name the member to read: name, agent session id, terminal id or pane id")
	}
	members, err := s.members(ctx, c.who.Namespace)
	if err != nil {
		return nil, err
	}
	m, terr := findMember(members, in.SessionID)
	if terr != nil {
		return nil, terr
	}
	if m.Status.PaneID == "" {
		return nil, toolerr.New(toolerr.WorkerGone, "member %s has no pane yet (phase %s)", m.Name, m.Status.Phase)
	}
	params := herdr.ReadParams{PaneID: m.Status.PaneID, Source: source}
	// The rules look at the whole detection text, as the screen watch reads it.
	if source != herdr.ReadSourceVisible && source != herdr.ReadSourceDetection {
		params.Lines = &lines
	}
	panes, err := s.panesOf(m)
	if err != nil {
		return nil, toolerr.New(toolerr.WorkerGone, "member %s's pane host cannot be reached: %v", m.Name, err)
	}
	read, err := panes.PaneRead(ctx, params)
	if errors.Is(err, herdr.ErrNotFound) {
		return nil, toolerr.New(toolerr.WorkerGone, "member %s's pane %s is gone", m.Name, m.Status.PaneID)
	}
	if err != nil {
		return nil, toolerr.New(toolerr.Internal, "reading member %s's pane: %v", m.Name, err)
	}
	text := herdr.ReadableText(read.Text)
	truncated := len(text) > maxReadBytes
	out := &ReadOutput{Member: m.Name, PaneID: m.Status.PaneID, Source: string(source), Truncated: truncated}
	if source == herdr.ReadSourceDetection {
		out.Detection = s.detection(ctx, panes, m, read.Text)
	}
	out.Text = textcut.Tail(text, maxReadBytes)
	return out, nil
}

// panesOf is where member m's terminal is read.
func (s *service) panesOf(m *fleetv1alpha1.Member) (PaneReader, error) {
	if s.opts.PaneHosts != nil {
		return s.opts.PaneHosts.For(m)
	}
	if s.opts.Panes == nil {
		return nil, errors.New("this gateway has no herdr connection")
	}
	return s.opts.Panes, nil
}
