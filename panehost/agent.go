package panehost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/memberfs"
	"github.com/fleetd/fleetd/panehost/paneserver"
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
	// MethodHostInfo says what the pane host does beyond herdr.
	MethodHostInfo = "fleetd.host.info"
	// MethodMemberRemove removes what a deleted member left: its agent
	// directory and, where it ran as a user of its own, that user's
	// processes, home and temporary directory.
	MethodMemberRemove = "fleetd.member.remove"

	resultAgentInstalled   = "agent_installed"
	resultAgentObservation = "agent_observation"
	resultHostInfo         = "host_info"
	resultMemberRemoved    = "member_removed"
)

// HostInfo is what a pane host does beyond herdr's protocol.
type HostInfo struct {
	// AgentFiles says it keeps agents' directories (fleetd.agent.*).
	AgentFiles bool `json:"agent_files"`
	// Users says each workspace runs as a Unix user of its own.
	Users bool `json:"users"`
}

// Caller makes a call of a method beyond herdr's. *herdr.Client is one.
type Caller interface {
	Call(ctx context.Context, method string, params any, wantType string, out any) error
}

// Info asks a pane host what it does beyond herdr; the real herdr, which
// knows none of fleetd's methods, does nothing beyond.
func Info(ctx context.Context, c Caller) (HostInfo, error) {
	var info HostInfo
	err := c.Call(ctx, MethodHostInfo, struct{}{}, resultHostInfo, &info)
	var herr *herdr.Error
	if errors.As(err, &herr) && herr.Code == herdr.CodeInvalidRequest {
		return HostInfo{}, nil
	}
	return info, err
}

// InstallParams are the params of fleetd.agent.install.
type InstallParams struct {
	// Dir is the member's agent directory; every file lies within it.
	Dir string `json:"dir"`
	// User is the label of the workspace the agent runs in: where the pane
	// host runs each workspace as a user of its own, the directory and its
	// files are that user's, written as that user.
	User string `json:"user,omitempty"`
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
	// User is the workspace's label, as for install: the record is read
	// as that user, so a link in the directory reaches nothing it may not.
	User string `json:"user,omitempty"`
	// Tokens is where counting the agent's transcript stopped last time.
	Tokens fleetv1alpha1.TranscriptCursor `json:"tokens,omitzero"`
}

// RemoveParams are the params of fleetd.member.remove.
type RemoveParams struct {
	// Dir is the member's agent directory, within the agents' root and
	// not the root itself; empty removes none.
	Dir string `json:"dir,omitempty"`
	// User is the label of the member's workspace, whose user's files go
	// where each workspace runs as a user of its own. Its workspace must
	// be closed.
	User string `json:"user,omitempty"`
}

// Observation is what an agent's hooks recorded: nil Hooks when no hook
// has run yet, nil Context when the transcript shows no model call (or the
// agent keeps none fleetd reads).
type Observation struct {
	Hooks   *agents.HookStatus   `json:"hooks,omitempty"`
	Context *agents.ContextUsage `json:"context,omitempty"`
	// Tokens is what the transcript gained since the cursor the
	// observation was asked from; nil when there is no transcript (yet).
	Tokens *agents.TokenCount `json:"tokens,omitempty"`
	// Error says why part of it could not be read; what could be is there.
	Error string `json:"error,omitempty"`
}

// ObserveAgent reads an agent's record from its directory dir, and counts
// the tokens its transcript gained since tokens.
func ObserveAgent(kind fleetv1alpha1.AgentKind, dir string, tokens fleetv1alpha1.TranscriptCursor) Observation {
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
	count, ok, err := agents.CountTokens(kind, dir, st.TranscriptPath, tokens)
	switch {
	case err != nil:
		o.Error = strings.TrimPrefix(o.Error+"; ", "; ") + "counting the transcript's tokens: " + err.Error()
	case ok:
		o.Tokens = &count
	}
	return o
}

// Users says whose a workspace's files are. *paneserver.Server is one.
type Users interface {
	// SwitchesUsers reports whether workspaces run as users of their own.
	SwitchesUsers() bool
	// WorkspaceUser is the Unix user the workspace labelled label runs as.
	WorkspaceUser(label string) (uid uint32, ok bool, err error)
	// RemoveWorkspaceUser removes what that user has, once its
	// workspace is closed.
	RemoveWorkspaceUser(label string) error
}

// Extensions are fleetd's methods for a pane host whose agents' directories
// lie within root; users (nil: the pane host's own) says whose they are.
func Extensions(root string, users func() Users) map[string]paneserver.Extension {
	owner := func(label string) (uint32, bool, *herdr.Error) {
		if users == nil || label == "" {
			return 0, false, nil
		}
		uid, ok, err := users().WorkspaceUser(label)
		if err != nil {
			return 0, false, &herdr.Error{Code: herdr.CodeInternalError, Message: err.Error()}
		}
		return uid, ok, nil
	}
	exts := map[string]paneserver.Extension{
		MethodHostInfo: func(context.Context, json.RawMessage) (any, *herdr.Error) {
			return struct {
				Type string `json:"type"`
				HostInfo
			}{resultHostInfo, HostInfo{AgentFiles: true, Users: users != nil && users().SwitchesUsers()}}, nil
		},
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
			uid, switched, herr := owner(p.User)
			if herr != nil {
				return nil, herr
			}
			install := func() error { return agents.Install(files, p.WorkingDir) }
			if switched {
				if err := ownDir(dir, uid); err != nil {
					return nil, &herdr.Error{Code: herdr.CodeInternalError, Message: err.Error()}
				}
				err := memberfs.As(uid, install)
				install = func() error { return err }
			}
			if err := install(); err != nil {
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
			uid, switched, herr := owner(p.User)
			if herr != nil {
				return nil, herr
			}
			o := Observation{}
			observe := func() error { o = ObserveAgent(p.Kind, dir, p.Tokens); return nil }
			if switched {
				_ = memberfs.As(uid, observe)
			} else {
				_ = observe()
			}
			return struct {
				Type string `json:"type"`
				Observation
			}{resultAgentObservation, o}, nil
		},
	}
	exts[MethodMemberRemove] = func(_ context.Context, raw json.RawMessage) (any, *herdr.Error) {
		var p RemoveParams
		if err := decode(raw, &p); err != nil {
			return nil, err
		}
		dir := ""
		if p.Dir != "" {
			var herr *herdr.Error
			if dir, herr = within(root, p.Dir); herr != nil {
				return nil, herr
			}
			if dir == filepath.Clean(root) {
				return nil, &herdr.Error{Code: herdr.CodeInvalidParams, Message: "refusing to remove the agents' root " + root}
			}
		}
		// The user first: its processes could write on in its directory.
		if users != nil && p.User != "" && users().SwitchesUsers() {
			if err := users().RemoveWorkspaceUser(p.User); err != nil {
				return nil, &herdr.Error{Code: herdr.CodeInternalError, Message: "removing the member's user: " + err.Error()}
			}
		}
		if dir != "" {
			if err := memberfs.RemoveTree(dir); err != nil {
				return nil, &herdr.Error{Code: herdr.CodeInternalError, Message: "removing the agent's directory: " + err.Error()}
			}
		}
		return struct {
			Type string `json:"type"`
		}{resultMemberRemoved}, nil
	}
	maps.Copy(exts, fileExtensions(owner))
	return exts
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
	Client Caller
	// User is the label of the agent's workspace (see InstallParams.User).
	User string
}

// Install writes a known agent's configuration in the pane host.
func (r Remote) Install(ctx context.Context, dir, workingDir string, files []agents.File) error {
	p := InstallParams{Dir: dir, User: r.User, WorkingDir: workingDir, Files: make([]InstallFile, 0, len(files))}
	for _, f := range files {
		p.Files = append(p.Files, InstallFile{Path: f.Path, Content: f.Content, Merge: f.Merge})
	}
	return r.Client.Call(ctx, MethodAgentInstall, p, resultAgentInstalled, nil)
}

// Observe reads what the agent's hooks recorded in the pane host, and
// counts its transcript's tokens from tokens on.
func (r Remote) Observe(ctx context.Context, kind fleetv1alpha1.AgentKind, dir string, tokens fleetv1alpha1.TranscriptCursor) (Observation, error) {
	var o Observation
	err := r.Client.Call(ctx, MethodAgentObserve, ObserveParams{Dir: dir, Kind: kind, User: r.User, Tokens: tokens}, resultAgentObservation, &o)
	return o, err
}

// Remove removes what the member left in the pane host: its agent
// directory dir ("" for none) and its workspace's user's files.
func (r Remote) Remove(ctx context.Context, dir string) error {
	return r.Client.Call(ctx, MethodMemberRemove, RemoveParams{Dir: dir, User: r.User}, resultMemberRemoved, nil)
}

// Local reaches agent directories on this machine: a pane server beside
// fleetd that shares its filesystem, such as the real herdr.
type Local struct{}

// Install writes a known agent's configuration.
func (Local) Install(_ context.Context, _ string, workingDir string, files []agents.File) error {
	return agents.Install(files, workingDir)
}

// Observe reads what the agent's hooks recorded, and counts its
// transcript's tokens from tokens on.
func (Local) Observe(_ context.Context, kind fleetv1alpha1.AgentKind, dir string, tokens fleetv1alpha1.TranscriptCursor) (Observation, error) {
	return ObserveAgent(kind, dir, tokens), nil
}

// Remove removes the member's agent directory dir ("" for none). Its
// processes run as fleetd's own user: nothing else of theirs is known.
func (Local) Remove(_ context.Context, dir string) error {
	if dir == "" {
		return nil
	}
	return os.RemoveAll(dir)
}

// ownDir makes dir a directory of uid's own, mode 0700, creating it (and,
// as the pane host, its parents, traversable by all) when missing.
func ownDir(dir string, uid uint32) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if err := os.Lchown(dir, int(uid), int(uid)); err != nil {
		return fmt.Errorf("giving %s to user %d: %w", dir, uid, err)
	}
	return os.Chmod(dir, 0o700)
}
