package gateway

import (
	"encoding/json"
	"io"
	"net/http"
)

// maxRESTBody bounds a REST request body.
const maxRESTBody = 64 << 10

// SpawnRequest is the body of POST /members.
type SpawnRequest struct {
	// Profile names the Profile; empty means the default one.
	Profile string `json:"profile,omitempty" jsonschema:"the profile the member runs from"`
	// Name is the new member's name; empty means a generated one.
	Name string `json:"name,omitempty" jsonschema:"the namespace"`
}

// Capabilities is the body of GET /v1/mcp/capabilities.
type Capabilities struct {
	// Namespaces lists every tool namespace, on or off.
	Namespaces []NamespaceCapability `json:"namespaces"`
}

// NamespaceCapability says whether a tool namespace is on and what it holds.
type NamespaceCapability struct {
	Name    ToolNamespace `json:"name" jsonschema:"the namespace"`
	Enabled bool          `json:"enabled" jsonschema:"whether the namespace is switched on"`
	Tools   []string      `json:"tools" jsonschema:"the tools of the namespace"`
}

// errorBody is the body of every REST error.
type errorBody struct {
	Error *ToolError `json:"error" jsonschema:"what went wrong"`
}

// restPrincipal returns the caller the authentication layer resolved.
func restPrincipal(r *http.Request) *Principal {
	p, _ := r.Context().Value(principalContextKey{}).(*Principal)
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
	te := toolErrorOf(err)
	writeJSON(w, te.Code.httpStatus(), errorBody{Error: te})
}

// restSpawn serves POST /members.
func (g *Gateway) restSpawn(w http.ResponseWriter, r *http.Request) {
	var req SpawnRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRESTBody))
	if err != nil {
		writeError(w, errorf(CodeInvalidArgument, "reading the body: %v", err))
		return
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, errorf(CodeInvalidArgument, "the body must be {\"profile\"?: string, \"name\"?: string}: %v", err))
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
	name, err := g.stop(r.Context(), restPrincipal(r), r.PathValue("paneId"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"stopped": name})
}

// restAgents serves GET /agents: the members of the caller's namespace with
// their status.
func (g *Gateway) restAgents(w http.ResponseWriter, r *http.Request) {
	p := restPrincipal(r)
	if err := g.allow(r.Context(), p, GetMembers); err != nil {
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

// capabilities says which tool namespaces are on and what they hold.
func (g *Gateway) capabilities() Capabilities {
	var c Capabilities
	for _, ns := range []ToolNamespace{ToolNamespaceBridge, ToolNamespaceTeam, ToolNamespaceProcess} {
		c.Namespaces = append(c.Namespaces, NamespaceCapability{Name: ns, Enabled: g.enabled(ns), Tools: g.toolsByNamespace(ns)})
	}
	return c
}

// restCapabilities serves GET /v1/mcp/capabilities.
func (g *Gateway) restCapabilities(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, g.capabilities())
}
