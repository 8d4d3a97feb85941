package gateway

import (
	"context"
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

// restSpawn serves POST /members.
func (g *Gateway) restSpawn(w http.ResponseWriter, r *http.Request) {
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
	m, err := g.spawn(r.Context(), p, spawnRequest{profile: req.Profile, name: req.Name})
	if err != nil {
		writeError(w, err)
		return
	}
	// A member just spawned has no queue yet.
	writeJSON(w, http.StatusCreated, memberView(m, p, queue{}))
}

// restStop serves DELETE /members/{paneId}.
func (g *Gateway) restStop(w http.ResponseWriter, r *http.Request) {
	s, err := g.stop(r.Context(), restPrincipal(r), r.PathValue("paneId"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, StopResponse{Stopped: s.name, AlreadyGone: s.alreadyGone})
}

// restAgents serves GET /agents: the members of the caller's namespace with
// their status.
func (g *Gateway) restAgents(w http.ResponseWriter, r *http.Request) {
	p := restPrincipal(r)
	if err := g.allow(r.Context(), p, identity.GetMembers); err != nil {
		writeError(w, err)
		return
	}
	members, err := g.members(r.Context(), p.Namespace)
	if err != nil {
		writeError(w, err)
		return
	}
	views, err := g.memberViews(r.Context(), members, p, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]MemberView{"agents": views})
}

// capabilities says what is on for the caller p.
func (g *Gateway) capabilities(ctx context.Context, p *identity.Principal) (*Capabilities, error) {
	c := &Capabilities{
		SupportedNamespaces:   []ToolNamespace{},
		Tools:                 []string{},
		ProcessEnabled:        g.enabled(ToolNamespaceProcess),
		TeamEnabled:           g.enabled(ToolNamespaceTeam),
		TeamManagePermissions: TeamManagePermissions(g.opts.TeamPolicy),
		TeamModelPresets:      []ProfileView{},
	}
	for _, ns := range []ToolNamespace{ToolNamespaceBridge, ToolNamespaceTeam, ToolNamespaceProcess} {
		nc := NamespaceCapability{Name: ns, Enabled: g.enabled(ns), Tools: []string{}}
		if nc.Enabled {
			nc.Tools = g.toolsByNamespace(ns)
			c.SupportedNamespaces = append(c.SupportedNamespaces, ns)
			c.Tools = append(c.Tools, nc.Tools...)
		}
		c.Namespaces = append(c.Namespaces, nc)
	}
	if c.TeamEnabled {
		profiles, err := g.profileViews(ctx, p.Namespace)
		if err != nil {
			return nil, err
		}
		c.TeamModelPresets = profiles
	}
	return c, nil
}

// restCapabilities serves GET /v1/mcp/capabilities.
func (g *Gateway) restCapabilities(w http.ResponseWriter, r *http.Request) {
	c, err := g.capabilities(r.Context(), restPrincipal(r))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}
