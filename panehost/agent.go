package panehost

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/herdr/paneserver"
)

// Methods fleetd's pane host answers beyond herdr's protocol. The real
// herdr answers them invalid_request (an unknown method).
const (
	// MethodAgentInstall writes a known agent's configuration into its
	// directory, before the agent starts.
	MethodAgentInstall = "fleetd.agent.install"
	// MethodAgentObserve reads what the agent's hooks recorded, and how much
	// context its session has left.
	MethodAgentObserve = "fleetd.agent.observe"

	resultAgentInstalled   = "agent_installed"
	resultAgentObservation = "agent_observation"
)

// InstallParams are the params of fleetd.agent.install.
type InstallParams struct {
	// Dir is the member's agent directory; every file lies within it.
	Dir string `json:"dir"`
	// WorkingDir is created for the agent to start in.
	WorkingDir string `json:"working_dir"`
	// Files are the agent's configuration.
	Files []InstallFile `json:"files"`
}

// InstallFile is one file of an agent's configuration.
type InstallFile struct {
	Path    string `json:"path"`
	Content []byte `json:"content"`
	// Merge sets Content's keys in the agent's own JSON state file.
	Merge bool `json:"merge,omitempty"`
}

// ObserveParams are the params of fleetd.agent.observe.
type ObserveParams struct {
	Dir  string                  `json:"dir"`
	Kind fleetv1alpha1.AgentKind `json:"kind"`
}

// Observation is what an agent's hooks recorded: nil Hooks when no hook
// has run yet, nil Context when the transcript shows no model call (or the
// agent keeps none fleetd reads).
type Observation struct {
	Hooks   *agents.HookStatus   `json:"hooks,omitempty"`
	Context *agents.ContextUsage `json:"context,omitempty"`
	// Error says why part of it could not be read; what could be is there.
	Error string `json:"error,omitempty"`
}

// ObserveAgent reads an agent's record from its directory dir.
func ObserveAgent(kind fleetv1alpha1.AgentKind, dir string) Observation {
	var o Observation
	st, ok, err := agents.ReadHookStatus(dir)
	switch {
	case err != nil:
		o.Error = "reading the hook record: " + err.Error()
		return o
	case !ok:
		return o
	}
	o.Hooks = &st
	if st.TranscriptPath == "" {
		return o
	}
	u, ok, err := agents.ContextUsageOf(kind, dir, st.TranscriptPath)
	switch {
	case err != nil:
		o.Error = "reading the context usage: " + err.Error()
	case ok:
		o.Context = &u
	}
	return o
}

// Extensions are fleetd's methods for a pane host whose agents' directories
// lie within root.
func Extensions(root string) map[string]paneserver.Extension {
	return map[string]paneserver.Extension{
		MethodAgentInstall: func(_ context.Context, raw json.RawMessage) (any, *herdr.Error) {
			var p InstallParams
			if err := decode(raw, &p); err != nil {
				return nil, err
			}
			dir, herr := within(root, p.Dir)
			if herr != nil {
				return nil, herr
			}
			if _, herr := within(dir, p.WorkingDir); herr != nil && p.WorkingDir != "" {
				return nil, herr
			}
			files := make([]agents.File, 0, len(p.Files))
			for _, f := range p.Files {
				path, herr := within(dir, f.Path)
				if herr != nil {
					return nil, herr
				}
				files = append(files, agents.File{Path: path, Content: f.Content, Merge: f.Merge})
			}
			if err := agents.Install(files, p.WorkingDir); err != nil {
				return nil, &herdr.Error{Code: herdr.CodeInternalError, Message: "installing the agent's configuration: " + err.Error()}
			}
			return struct {
				Type string `json:"type"`
			}{resultAgentInstalled}, nil
		},
		MethodAgentObserve: func(_ context.Context, raw json.RawMessage) (any, *herdr.Error) {
			var p ObserveParams
			if err := decode(raw, &p); err != nil {
				return nil, err
			}
			dir, herr := within(root, p.Dir)
			if herr != nil {
				return nil, herr
			}
			return struct {
				Type string `json:"type"`
				Observation
			}{resultAgentObservation, ObserveAgent(p.Kind, dir)}, nil
		},
	}
}

func decode(raw json.RawMessage, into any) *herdr.Error {
	if err := json.Unmarshal(raw, into); err != nil {
		return &herdr.Error{Code: herdr.CodeInvalidParams, Message: "decoding params: " + err.Error()}
	}
	return nil
}

// within cleans path and checks that it lies in root (root itself counts).
// Symbolic links are the agent's own business: the agent package resolves
// a transcript's within the directory, and writes replace a file whole.
func within(root, path string) (string, *herdr.Error) {
	if root == "" {
		return "", &herdr.Error{Code: herdr.CodeInvalidParams, Message: "this pane host keeps no agent directories"}
	}
	clean := filepath.Clean(path)
	rel, err := filepath.Rel(filepath.Clean(root), clean)
	if !filepath.IsAbs(path) || err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", &herdr.Error{Code: herdr.CodeInvalidParams, Message: fmt.Sprintf("%q is not within the agent directory %s", path, root)}
	}
	return clean, nil
}

// Remote reaches a pane host's agent directories through its client.
type Remote struct {
	Client *herdr.Client
}

// Install writes a known agent's configuration in the pane host.
func (r Remote) Install(ctx context.Context, dir, workingDir string, files []agents.File) error {
	p := InstallParams{Dir: dir, WorkingDir: workingDir, Files: make([]InstallFile, 0, len(files))}
	for _, f := range files {
		p.Files = append(p.Files, InstallFile{Path: f.Path, Content: f.Content, Merge: f.Merge})
	}
	return r.Client.Call(ctx, MethodAgentInstall, p, resultAgentInstalled, nil)
}

// Observe reads what the agent's hooks recorded in the pane host.
func (r Remote) Observe(ctx context.Context, kind fleetv1alpha1.AgentKind, dir string) (Observation, error) {
	var o Observation
	err := r.Client.Call(ctx, MethodAgentObserve, ObserveParams{Dir: dir, Kind: kind}, resultAgentObservation, &o)
	return o, err
}

// Local reaches agent directories on this machine: a pane server beside
// fleetd that shares its filesystem, such as the real herdr.
type Local struct{}

// Install writes a known agent's configuration.
func (Local) Install(_ context.Context, _ string, workingDir string, files []agents.File) error {
	return agents.Install(files, workingDir)
}

// Observe reads what the agent's hooks recorded.
func (Local) Observe(_ context.Context, kind fleetv1alpha1.AgentKind, dir string) (Observation, error) {
	return ObserveAgent(kind, dir), nil
}
