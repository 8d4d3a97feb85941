package gateway

import (
	"context"
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

// StopResponse is the body of DELETE /members/{paneId}.
type StopResponse struct {
	Stopped     string `json:"stopped"`
	AlreadyGone bool   `json:"alreadyGone,omitempty"`
}

// Capabilities is the body of GET /v1/mcp/capabilities: what this gateway
// offers its caller.
type Capabilities struct {
	// SupportedNamespaces lists the tool namespaces that are on.
	SupportedNamespaces []ToolNamespace `json:"supportedNamespaces"`
	// Tools lists the tools that can be called: those of the namespaces
	// that are on.
	Tools []string `json:"tools"`
	// ProcessEnabled and TeamEnabled say whether the process and team
	// namespaces are on.
	ProcessEnabled bool `json:"processEnabled"`
	TeamEnabled    bool `json:"teamEnabled"`
	// TeamManagePermissions says what team members that are not leads may
	// do with team_manage (leads and primaries may do both).
	TeamManagePermissions TeamManagePermissions `json:"teamManagePermissions"`
	// TeamModelPresets are the Profiles of the caller's namespace that
	// team_manage add can start a member from.
	TeamModelPresets []ModelPreset `json:"teamModelPresets"`
	// Namespaces lists every namespace, on or off; one that is off lists no
	// tools, and calls to its tools answer feature_disabled.
	Namespaces []NamespaceCapability `json:"namespaces"`
}

// TeamManagePermissions is the team policy as capabilities show it.
type TeamManagePermissions struct {
	NonLeadCanAdd    bool `json:"nonLeadCanAdd"`
	NonLeadCanRemove bool `json:"nonLeadCanRemove"`
}

// ModelPreset is a Profile as a team model preset.
type ModelPreset struct {
	// Name is the Profile's name: team_manage's profile argument.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Agent       string `json:"agent,omitempty"`
	Model       string `json:"model,omitempty"`
	Effort      string `json:"effort,omitempty"`
	Billing     string `json:"billing"`
	Default     bool   `json:"default,omitempty"`
}

// NamespaceCapability says whether a tool namespace is on and what it holds.
type NamespaceCapability struct {
	Name    ToolNamespace `json:"name"`
	Enabled bool          `json:"enabled"`
	// Tools are the namespace's tools, or none when it is off.
	Tools []string `json:"tools"`
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

// capabilities says what is on for the caller p.
func (g *Gateway) capabilities(ctx context.Context, p *Principal) (*Capabilities, error) {
	c := &Capabilities{
		SupportedNamespaces:   []ToolNamespace{},
		Tools:                 []string{},
		ProcessEnabled:        g.enabled(ToolNamespaceProcess),
		TeamEnabled:           g.enabled(ToolNamespaceTeam),
		TeamManagePermissions: TeamManagePermissions(g.opts.TeamPolicy),
		TeamModelPresets:      []ModelPreset{},
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
		for _, pr := range profiles {
			c.TeamModelPresets = append(c.TeamModelPresets, ModelPreset{
				Name: pr.Name, Description: pr.Description, Agent: pr.Agent, Model: pr.Model,
				Effort: pr.Effort, Billing: pr.Billing, Default: pr.Default,
			})
		}
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
