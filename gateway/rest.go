package gateway

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// maxRESTBody bounds a REST request body.
const maxRESTBody = 64 << 10

// restPrincipal returns the caller the authentication layer resolved.
func restPrincipal(r *http.Request) *identity.Principal {
	p, _ := r.Context().Value(principalContextKey{}).(*identity.Principal)
	return p
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes a REST error with the status its code implies.
func writeError(w http.ResponseWriter, err error) {
	te := toolerr.From(err)
	writeJSON(w, te.Code.HTTPStatus(), errorBody{Error: te})
}

// restAPI is the REST face: each handler decodes a request, calls one of
// the service's verbs and encodes what it returns.
type restAPI struct {
	svc *service
	// tools lists the tools of a namespace, for the capabilities.
	tools func(ToolNamespace) []string
}

// routes registers the REST endpoints, each behind authenticate.
func (a *restAPI) routes(mux *http.ServeMux, authenticate func(http.Handler) http.Handler) {
	mux.Handle("POST /members", authenticate(http.HandlerFunc(a.spawn)))
	mux.Handle("DELETE /members/{paneId}", authenticate(http.HandlerFunc(a.stop)))
	mux.Handle("GET /agents", authenticate(http.HandlerFunc(a.agents)))
	mux.Handle("GET /v1/mcp/capabilities", authenticate(http.HandlerFunc(a.capabilities)))
	mux.Handle("GET /v1/diagnostics/providers", authenticate(http.HandlerFunc(a.providers)))
}

// spawn serves POST /members.
func (a *restAPI) spawn(w http.ResponseWriter, r *http.Request) {
	var req SpawnRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRESTBody))
	if err != nil {
		writeError(w, toolerr.New(toolerr.InvalidArgument, "reading the body: %v", err))
		return
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, toolerr.New(toolerr.InvalidArgument, "the body must be {\"profile\"?: string, \"name\"?: string}: %v", err))
			return
		}
	}
	p := restPrincipal(r)
	m, err := a.svc.spawnMember(r.Context(), p, newMember{profile: req.Profile, name: req.Name})
	if err != nil {
		writeError(w, err)
		return
	}
	// A member just spawned has no queue yet.
	writeJSON(w, http.StatusCreated, memberView(m, p, queue{}))
}

// stop serves DELETE /members/{paneId}.
func (a *restAPI) stop(w http.ResponseWriter, r *http.Request) {
	s, err := a.svc.stopMember(r.Context(), restPrincipal(r), r.PathValue("paneId"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, StopResponse{Stopped: s.name, AlreadyGone: s.alreadyGone})
}

// agents serves GET /agents: the members of the caller's namespace with
// their status.
func (a *restAPI) agents(w http.ResponseWriter, r *http.Request) {
	views, err := a.svc.agents(r.Context(), restPrincipal(r))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]MemberView{"agents": views})
}

// capabilities serves GET /v1/mcp/capabilities.
func (a *restAPI) capabilities(w http.ResponseWriter, r *http.Request) {
	c, err := a.svc.capabilities(r.Context(), restPrincipal(r), a.tools)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// providers serves GET /v1/diagnostics/providers.
func (a *restAPI) providers(w http.ResponseWriter, r *http.Request) {
	out, err := a.svc.providers(r.Context(), restPrincipal(r))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
