package controllers

import (
	"context"
	"errors"
	"fmt"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
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

// MemberFiles reads the files members send, where their agents run: the
// gateway's way to the images a member sends by path.
type MemberFiles struct{ runtimes *Runtimes }

// NewMemberFiles reaches members where runtimes says they run.
func NewMemberFiles(runtimes *Runtimes) *MemberFiles {
	return &MemberFiles{runtimes: runtimes}
}

// ReadFile reads path, relative to m's working directory or absolute within
// it, at most maxBytes (panehost.ReadWithin's errors).
func (f *MemberFiles) ReadFile(ctx context.Context, m *fleetv1alpha1.Member, path string, maxBytes int64) ([]byte, error) {
	if m.Status.WorkingDir == "" {
		return nil, fmt.Errorf("%w: member %s has not recorded one; it does when its pane next starts", ErrNoWorkingDir, m.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	files, err := f.runtimes.Files(ctx, m)
	if err != nil {
		return nil, err
	}
	return files.ReadFile(ctx, m.Status.WorkingDir, path, maxBytes)
}
