package gateway

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/textcut"
)

// screenFeeds reads each member's terminal once for every dashboard page
// that shows it: one read loop per member, whose screens are fanned out to
// the pages, so a hundred open pages of one member cost the pane server
// what one does. A loop runs only while a page watches it.
type screenFeeds struct {
	d     *dashboard
	mu    sync.Mutex
	feeds map[types.NamespacedName]*screenFeed
}

func newScreenFeeds(d *dashboard) *screenFeeds {
	return &screenFeeds{d: d, feeds: map[types.NamespacedName]*screenFeed{}}
}

// screenFeed is the read loop of one member's terminal and its watchers.
type screenFeed struct {
	key  types.NamespacedName
	stop chan struct{}

	mu       sync.Mutex
	latest   DashboardScreen
	read     bool
	watchers map[*screenWatch]struct{}
}

// screenWatch is one page's view of a feed: wake has room for one signal,
// and the page reads the latest screen when it wakes.
type screenWatch struct {
	feed *screenFeed
	wake chan struct{}
}

// watch starts watching the member at key, starting its read loop when
// no page watched it yet. A screen already read is signalled at once.
func (fs *screenFeeds) watch(key types.NamespacedName) *screenWatch {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, ok := fs.feeds[key]
	if !ok {
		f = &screenFeed{key: key, stop: make(chan struct{}), watchers: map[*screenWatch]struct{}{}}
		fs.feeds[key] = f
		go f.run(fs.d)
	}
	w := &screenWatch{feed: f, wake: make(chan struct{}, 1)}
	f.mu.Lock()
	f.watchers[w] = struct{}{}
	if f.read {
		w.wake <- struct{}{}
	}
	f.mu.Unlock()
	return w
}

// unwatch ends a watch; the last one stops the member's read loop.
func (fs *screenFeeds) unwatch(w *screenWatch) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := w.feed
	f.mu.Lock()
	delete(f.watchers, w)
	last := len(f.watchers) == 0
	f.mu.Unlock()
	if last && fs.feeds[f.key] == f {
		delete(fs.feeds, f.key)
		close(f.stop)
	}
}

// count is the number of read loops running.
func (fs *screenFeeds) count() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.feeds)
}

// screen is the latest screen the feed read.
func (w *screenWatch) screen() DashboardScreen {
	w.feed.mu.Lock()
	defer w.feed.mu.Unlock()
	return w.feed.latest
}

// run reads the terminal now and then every screenInterval, on the
// gateway's clock, until the last watcher leaves or the gateway stops,
// and wakes the watchers when the screen changed.
func (f *screenFeed) run(d *dashboard) {
	t := d.svc.opts.Clock.NewTicker(screenInterval)
	defer t.Stop()
	var last uint64
	for {
		screen := d.readScreen(context.Background(), f.key)
		h := fnv.New64a()
		_, _ = h.Write([]byte(screen.PaneID + "\x00" + screen.Text + "\x00" + screen.Unavailable))
		if sum := h.Sum64(); sum != last {
			last = sum
			f.publish(screen)
		}
		select {
		case <-f.stop:
			return
		case <-d.svc.stopping:
			return
		case <-t.C():
		}
	}
}

func (f *screenFeed) publish(screen DashboardScreen) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latest, f.read = screen, true
	for w := range f.watchers {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// readScreen reads what the member's terminal shows now, through herdr's
// pane.read on the member's pane host (as bridge_read does), as plain text.
func (d *dashboard) readScreen(ctx context.Context, key types.NamespacedName) DashboardScreen {
	var m fleetv1alpha1.Member
	if err := d.svc.cache.Get(ctx, key, &m); err != nil {
		return DashboardScreen{Unavailable: "the member is gone"}
	}
	if m.Status.PaneID == "" {
		return DashboardScreen{Unavailable: fmt.Sprintf("no pane yet (phase %s)", summaryStatus(&m))}
	}
	panes, err := d.svc.panesOf(&m)
	if err != nil {
		return DashboardScreen{PaneID: m.Status.PaneID, Unavailable: "the member's pane host cannot be reached: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, screenReadTimeout)
	defer cancel()
	read, err := panes.PaneRead(ctx, herdr.ReadParams{PaneID: m.Status.PaneID, Source: herdr.ReadSourceVisible})
	switch {
	case errors.Is(err, herdr.ErrNotFound):
		return DashboardScreen{PaneID: m.Status.PaneID, Unavailable: "the pane is gone"}
	case err != nil:
		return DashboardScreen{PaneID: m.Status.PaneID, Unavailable: "herdr did not answer: " + err.Error()}
	}
	return DashboardScreen{PaneID: m.Status.PaneID, Text: textcut.Tail(herdr.ReadableText(read.Text), maxReadBytes)}
}
