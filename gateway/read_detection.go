package gateway

import (
	"context"
	"sync"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/herdr/detect"
	"github.com/fleetd/fleetd/internal/textcut"
)

// maxRegionBytes bounds the deciding rule's region in a detection read: a
// dialog, or a prompt box; a rule over the whole screen has its end kept.
const maxRegionBytes = 4 << 10

// builtinDetectors are fleetd's own screen rules, for a gateway that was
// given none.
var builtinDetectors = sync.OnceValue(func() map[string]*detect.Detector {
	d, err := detect.Load("")
	if err != nil {
		panic("fleetd's built-in screen manifests: " + err.Error())
	}
	return d
})

// detectors are the screen rules by agent label.
func (s *service) detectors() map[string]*detect.Detector {
	if s.opts.Detectors != nil {
		return s.opts.Detectors
	}
	return builtinDetectors()
}

// detection runs member m's screen rules over its detection text and the
// terminal title, as the controllers' screen watch does, and says which
// rules matched and what they concluded, beside the status herdr holds
// (which a hook may have set). A plain command has no rules: only its
// status is shown.
func (s *service) detection(ctx context.Context, panes PaneReader, m *fleetv1alpha1.Member, text string) *DetectionView {
	v := &DetectionView{AgentStatus: string(m.Status.AgentStatus), Matches: []DetectionMatch{}}
	var title string
	if info, err := panes.AgentGet(ctx, m.Status.PaneID); err == nil {
		v.AgentStatus = string(info.AgentStatus)
		if info.TerminalTitle != nil {
			title = *info.TerminalTitle
		}
	}
	v.Title = herdr.ReadableText(title)
	d := s.detectors()[string(m.Status.AgentKind)]
	if m.Status.AgentKind == "" || d == nil {
		return v
	}
	e := d.Explain(detect.Screen{Text: text, Title: title})
	v.Manifest = d.Agent() + " " + d.Version()
	v.State, v.Rule, v.Visible, v.Skip = string(e.State), e.Rule, e.Visible, e.Skip
	v.Region = textcut.Tail(herdr.ReadableText(e.Text), maxRegionBytes)
	for _, mt := range e.Matches {
		v.Matches = append(v.Matches, DetectionMatch{Rule: mt.Rule, State: string(mt.State), Priority: mt.Priority, Region: mt.Region})
	}
	return v
}
