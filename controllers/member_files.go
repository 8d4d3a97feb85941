package controllers

import (
	"context"
	"errors"
	"fmt"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost"
)

// A member's files where its agent runs: what it sends with a message lies
// within its working directory, and what is sent to it goes into its agent
// directory. Both are reached where the agent runs.

// ErrNoWorkingDir says fleetd does not know where a member works (yet).
var ErrNoWorkingDir = errors.New("the member's working directory is not known")

// recordDirs records in m's status where its agent works and keeps its
// directory, as paths where it runs.
func recordDirs(m *fleetv1alpha1.Member, l Launch, agentDir string) {
	m.Status.WorkingDir, m.Status.AgentDir = l.WorkingDir, ""
	if l.AgentKind != "" {
		m.Status.AgentDir = agentDir
	}
}

// filesOf is where member m's files are reached on the pane host panes
// its panes live on: through its Pod's pane host; through the shared pane
// server where it keeps the agents' files, as the member's own user; or on
// this machine. The Member controller makes the same choice for an agent's
// configuration.
func filesOf(ctx context.Context, m *fleetv1alpha1.Member, panes Panes, shared *sharedHost) AgentFiles {
	c, remote := panes.(panehost.Caller)
	switch {
	case !remote:
	case m.Status.Runtime == fleetv1alpha1.RuntimePod:
		return panehost.Remote{Client: c}
	default:
		if info, ok := shared.info(ctx, panes); ok && info.AgentFiles {
			return panehost.Remote{Client: c, User: workspaceLabel(m)}
		}
	}
	return panehost.Local{}
}

// MemberFiles reads the files members send, where their agents run: the
// gateway's way to the images a member sends by path.
type MemberFiles struct {
	hosts  PaneHosts
	shared sharedHost
}

// NewMemberFiles reaches members on the shared pane server (nil when there
// is none) or, with hosts, in their Pods.
func NewMemberFiles(shared *herdr.Client, hosts *panehost.Hosts) *MemberFiles {
	var panes Panes
	if shared != nil {
		panes = shared
	}
	return &MemberFiles{hosts: NewPaneHosts(panes, hosts)}
}

// ReadFile reads path, relative to m's working directory or absolute within
// it, at most maxBytes (panehost.ReadWithin's errors).
func (f *MemberFiles) ReadFile(ctx context.Context, m *fleetv1alpha1.Member, path string, maxBytes int64) ([]byte, error) {
	if m.Status.WorkingDir == "" {
		return nil, fmt.Errorf("%w: member %s has not recorded one; it does when its pane next starts", ErrNoWorkingDir, m.Name)
	}
	panes, err := f.hosts.For(m)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	return filesOf(ctx, m, panes, &f.shared).ReadFile(ctx, m.Status.WorkingDir, path, maxBytes)
}
