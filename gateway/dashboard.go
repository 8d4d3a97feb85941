package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"sync"
	"time"

	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/gateway/ui"
)

// The dashboard: a web view of the fleet at /ui, live from the gateway's
// informers. Its page and scripts are static and carry no data, so they
// are served to anyone; everything it shows comes from /ui/api, where
// every request is authenticated like any other (a bearer token, never a
// cookie) and sees only what its principal may see.

// dashboardCSP lets the page load nothing but its own scripts and styles
// and talk to nothing but the gateway. xterm.js sets its terminal's styles
// at run time, hence inline styles.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// dashboard is the dashboard's face: its page, its event streams (one
// per open page, dashboard_stream.go) and its two actions, each of which
// calls one of the service's verbs.
type dashboard struct {
	svc *service
	// viewers are the open pages, woken by the informers' events.
	viewers *viewers
	// screens reads each shown member's terminal once for all its pages.
	screens *screenFeeds
	// streams bounds the streams each principal keeps open.
	streams *principalSlots
}

func newDashboard(svc *service) *dashboard {
	d := &dashboard{svc: svc, viewers: newViewers(), streams: newPrincipalSlots(svc.opts.MaxDashboardStreams)}
	d.screens = newScreenFeeds(d)
	return d
}

// routes registers the dashboard's page and API, the API behind
// authenticate.
func (d *dashboard) routes(mux *http.ServeMux, authenticate func(http.Handler) http.Handler) {
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.HandleFunc("GET /ui/{file...}", serveDashboardAsset)
	// State-changing requests from another site's page are refused before
	// anything else; the token in a header is the real guard, since no
	// other page can set it.
	actions := http.NewCrossOriginProtection()
	mux.Handle("GET /ui/api/fleet", authenticate(http.HandlerFunc(d.fleet)))
	mux.Handle("GET /ui/api/members/{member}", authenticate(http.HandlerFunc(d.memberPage)))
	mux.Handle("POST /ui/api/members/{member}/messages", actions.Handler(authenticate(http.HandlerFunc(d.send))))
	mux.Handle("POST /ui/api/messages/{dispatchId}/cancel", actions.Handler(authenticate(http.HandlerFunc(d.cancel))))
}

// send serves POST /ui/api/members/{member}/messages: the service's send,
// as bridge_send {sessionId: member, wait: false, autoSpawn: false}.
func (d *dashboard) send(w http.ResponseWriter, r *http.Request) {
	var req DashboardSendRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4*fleetv1alpha1.MaxContentBytes))
	if err != nil {
		writeError(w, toolerr.New(toolerr.InvalidArgument, "reading the body: %v", err))
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, toolerr.New(toolerr.InvalidArgument, "the body must be {\"content\": string, \"idempotencyKey\"?: string}: %v", err))
		return
	}
	out, err := d.svc.send(r.Context(), newCall("bridge_send", restPrincipal(r)), SendInput{
		Content:        req.Content,
		SessionID:      r.PathValue("member"),
		Wait:           ptr.To(false),
		AutoSpawn:      ptr.To(false),
		IdempotencyKey: req.IdempotencyKey,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, out)
}

// cancel serves POST /ui/api/messages/{dispatchId}/cancel: the service's
// cancel.
func (d *dashboard) cancel(w http.ResponseWriter, r *http.Request) {
	out, err := d.svc.cancel(r.Context(), newCall("bridge_cancel", restPrincipal(r)), CancelInput{DispatchID: r.PathValue("dispatchId")})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// dashboardAsset is one built file of the dashboard.
type dashboardAsset struct {
	body        []byte
	etag        string
	contentType string
}

// dashboardAssets are the built files, read once from the binary.
var dashboardAssets = sync.OnceValues(func() (map[string]*dashboardAsset, error) {
	return loadDashboardAssets(ui.Files())
})

func loadDashboardAssets(files fs.FS) (map[string]*dashboardAsset, error) {
	assets := map[string]*dashboardAsset{}
	err := fs.WalkDir(files, ".", func(name string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		body, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		assets[name] = &dashboardAsset{body: body, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, contentType: ct}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the dashboard's assets: %w", err)
	}
	return assets, nil
}

// serveDashboardAsset serves GET /ui/{file}; /ui/ is the page.
func serveDashboardAsset(w http.ResponseWriter, r *http.Request) {
	assets, err := dashboardAssets()
	if err != nil {
		writeError(w, toolerr.New(toolerr.Internal, "%v", err))
		return
	}
	name := r.PathValue("file")
	if name == "" {
		name = "index.html"
	}
	a, ok := assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("ETag", a.etag)
	// Revalidated every time, answered 304 while unchanged: a new fleetd
	// is never shown an old script.
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", dashboardCSP)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}
