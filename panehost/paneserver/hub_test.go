package paneserver

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fleetd/fleetd/herdr"
)

// TestHubRetainsTheLatestEvents checks herdr's bound on what it keeps: the
// latest 512 events of every kind together. A subscription that falls
// further behind gets only those, oldest first, and skips what it does not
// want without reading it again.
func TestHubRetainsTheLatestEvents(t *testing.T) {
	h := newHub()
	const published = 2000
	for i := range published {
		kind := herdr.EventPaneCreated
		if i%2 == 1 {
			kind = herdr.EventPaneClosed
		}
		h.publish(herdr.Event{Kind: kind, Data: herdr.EventData{Type: kind, PaneID: fmt.Sprintf("w1:p%d", i)}})
	}
	lagging := &cursor{kind: herdr.EventPaneClosed}
	var got []string
	for {
		line, ok := h.next(lagging)
		if !ok {
			break
		}
		got = append(got, string(line))
	}
	if len(got) != retainedEvents/2 {
		t.Fatalf("lagging subscription got %d pane_closed events, want the %d retained", len(got), retainedEvents/2)
	}
	wantFirst := fmt.Sprintf(`"pane_id":"w1:p%d"`, published-retainedEvents+1)
	if !contains(got[0], wantFirst) {
		t.Errorf("first replayed event = %s, want the oldest retained (%s)", got[0], wantFirst)
	}
	if seq, _ := h.now(); lagging.after != seq {
		t.Errorf("cursor stopped at %d, want it past everything retained (%d)", lagging.after, seq)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
