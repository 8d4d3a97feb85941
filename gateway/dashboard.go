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

// dashboardRoutes registers the dashboard's page and API.
func (g *Gateway) dashboardRoutes(mux *http.ServeMux) {
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.HandleFunc("GET /ui/{file...}", serveDashboardAsset)
	// State-changing requests from another site's page are refused before
	// anything else; the token in a header is the real guard, since no
	// other page can set it.
	actions := http.NewCrossOriginProtection()
	mux.Handle("GET /ui/api/fleet", g.authenticate(http.HandlerFunc(g.dashboardFleet)))
	mux.Handle("GET /ui/api/members/{member}", g.authenticate(http.HandlerFunc(g.dashboardMemberPage)))
	mux.Handle("POST /ui/api/members/{member}/messages", actions.Handler(g.authenticate(http.HandlerFunc(g.dashboardSend))))
	mux.Handle("POST /ui/api/messages/{dispatchId}/cancel", actions.Handler(g.authenticate(http.HandlerFunc(g.dashboardCancel))))
}

// dashboardSend serves POST /ui/api/members/{member}/messages: what
// bridge_send {sessionId: member, wait: false} does, through the same code.
func (g *Gateway) dashboardSend(w http.ResponseWriter, r *http.Request) {
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
	out, err := g.bridgeSend(r.Context(), &call{tool: "bridge_send", who: restPrincipal(r)}, SendInput{
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

// dashboardCancel serves POST /ui/api/messages/{dispatchId}/cancel: what
// bridge_cancel does, through the same code.
func (g *Gateway) dashboardCancel(w http.ResponseWriter, r *http.Request) {
	out, err := g.bridgeCancel(r.Context(), &call{tool: "bridge_cancel", who: restPrincipal(r)}, CancelInput{DispatchID: r.PathValue("dispatchId")})
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
