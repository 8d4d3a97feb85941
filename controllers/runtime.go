package controllers

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost"
)

// Where Members' agents run. The Member reconciler, the Delegation
// reconciler and the gateway ask a Member's runtime (Runtimes.of) for what
// differs between the places an agent runs; nothing else looks at
// status.runtime. A new way to run members is a new memberRuntime.

// memberRuntime is one place Members' agents run.
type memberRuntime interface {
	// panes is the pane host m's panes live on.
	panes(m *fleetv1alpha1.Member) (PaneClient, error)
	// files is where m's agent's configuration, hook record and working
	// directory are reached.
	files(ctx context.Context, m *fleetv1alpha1.Member) (AgentFiles, error)
	// home is where m's known agent keeps what fleetd seeds for it, and
	// the command its hooks run, as paths where it runs.
	home(m *fleetv1alpha1.Member) agentHome
	// gateway is how m's agent mounts the gateway: the MCP URL its panes
	// reach, and the token they present ("" where the runtime presents
	// one of its own).
	gateway(ctx context.Context, r *MemberReconciler, s *memberScope) (url, token string, err error)
	// prepare brings up what m's agent runs in; up is false until its pane
	// host answers, and result says when to look again.
	prepare(ctx context.Context, r *MemberReconciler, s *memberScope, w Worker) (up bool, result ctrl.Result, err error)
	// isolation is how m's agent is kept from the others', on panes.
	isolation(ctx context.Context, m *fleetv1alpha1.Member, panes PaneClient) *isolation
	// teardown releases what a deleted m held where it ran; done is false
	// while it waits, and result says when to look again.
	teardown(ctx context.Context, r *MemberReconciler, m *fleetv1alpha1.Member) (done bool, result ctrl.Result, err error)
	// forget drops what is kept to reach a Member that is gone.
	forget(uid types.UID)
	// suspendBlocker says why a member with w's spec cannot be suspended
	// on this runtime (member_suspend.go), or "" when it can.
	suspendBlocker(w Worker) string
}

// Runtimes routes each Member to the runtime it runs on: the shared pane
// server beside fleetd, or a Pod of its own. The reconcilers, and the
// gateway's terminal and file reads, ask it where a Member runs.
type Runtimes struct {
	shared *sharedRuntime
	pod    *podRuntime
}

// NewRuntimes runs members on the shared pane server (nil when there is
// none) and, with hosts, in Pods. agentDir and hookCommand are where a
// shared member's known agent keeps its directory and how its hooks run
// `fleetd hook`: only the Member reconciler needs them.
func NewRuntimes(shared PaneClient, hosts *panehost.Hosts, agentDir string, hookCommand []string) *Runtimes {
	return &Runtimes{
		shared: &sharedRuntime{server: shared, agentDir: agentDir, hookCommand: hookCommand},
		pod:    &podRuntime{hosts: hosts},
	}
}

// of is m's runtime.
func (rt *Runtimes) of(m *fleetv1alpha1.Member) memberRuntime {
	if m.Status.Runtime == fleetv1alpha1.RuntimePod {
		return rt.pod
	}
	return rt.shared
}

// For is the pane host m's panes live on.
func (rt *Runtimes) For(m *fleetv1alpha1.Member) (PaneClient, error) { return rt.of(m).panes(m) }

// Forget drops what is kept to reach a Member that is gone.
func (rt *Runtimes) Forget(uid types.UID) {
	rt.shared.forget(uid)
	rt.pod.forget(uid)
}

// Files is where m's files are reached.
func (rt *Runtimes) Files(ctx context.Context, m *fleetv1alpha1.Member) (AgentFiles, error) {
	return rt.of(m).files(ctx, m)
}

// sharedRuntime runs members in panes of the pane server beside fleetd,
// each in a workspace of its own, as a Unix user of its own where the
// server can switch users.
type sharedRuntime struct {
	server      PaneClient
	info        sharedHost
	agentDir    string
	hookCommand []string
}

func (s *sharedRuntime) panes(m *fleetv1alpha1.Member) (PaneClient, error) {
	if s.server == nil {
		return nil, fmt.Errorf("%w: member %s runs on the shared pane server, and this fleetd has none", panehost.ErrNoPaneHost, m.Name)
	}
	return s.server, nil
}

// files are the pane server's where it keeps the agents' files, as the
// member's own user; else on this machine, which shares fleetd's
// filesystem with the pane server.
func (s *sharedRuntime) files(ctx context.Context, m *fleetv1alpha1.Member) (AgentFiles, error) {
	if s.server == nil {
		return panehost.Local{}, nil
	}
	if c, remote := s.server.(panehost.Caller); remote {
		if info, ok := s.info.info(ctx, s.server); ok && info.AgentFiles {
			return panehost.Remote{Client: c, User: workspaceLabel(m)}, nil
		}
	}
	return panehost.Local{}, nil
}

// home is one directory per Member incarnation under the agent directory,
// so a new Member of the same name starts afresh.
func (s *sharedRuntime) home(m *fleetv1alpha1.Member) agentHome {
	uid := string(m.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return agentHome{Dir: filepath.Join(s.agentDir, m.Namespace, m.Name+"-"+uid), HookCommand: s.hookCommand}
}

// gateway is fleetd's own URL, and the Member's token from its Secret.
func (s *sharedRuntime) gateway(ctx context.Context, r *MemberReconciler, sc *memberScope) (string, string, error) {
	token, err := r.ensureToken(ctx, sc)
	return r.MCPURL, token, err
}

func (s *sharedRuntime) prepare(context.Context, *MemberReconciler, *memberScope, Worker) (bool, ctrl.Result, error) {
	return true, ctrl.Result{}, nil
}

func (s *sharedRuntime) isolation(ctx context.Context, _ *fleetv1alpha1.Member, panes PaneClient) *isolation {
	if info, ok := s.info.info(ctx, panes); ok {
		return isolationOnShared(info)
	}
	return nil
}

// teardown closes the member's workspace and removes its files. When the
// pane server does not answer, it gives up after cleanupTimeout, so that a
// Member never hangs in deletion.
func (s *sharedRuntime) teardown(ctx context.Context, r *MemberReconciler, m *fleetv1alpha1.Member) (bool, ctrl.Result, error) {
	if panes, err := s.panes(m); err == nil {
		// By label, whether or not a workspace id was ever recorded: a
		// Member stopped at once may have a pane no pass wrote down.
		hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
		err := closeWorkspaces(hctx, panes, m)
		cancel()
		if err != nil {
			waited := r.Clock.Since(m.DeletionTimestamp.Time)
			if waited < cleanupTimeout {
				log.FromContext(ctx).Info("Waiting for herdr to close the pane", "member", klog.KObj(m), "error", err.Error())
				return false, ctrl.Result{RequeueAfter: 2 * time.Second}, nil
			}
			r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonCleanupTimedOut, "Delete",
				"Gave up closing workspace %s after %s: %v", m.Status.WorkspaceID, cleanupTimeout, err)
		}
	}
	s.removeFiles(ctx, m)
	return true, ctrl.Result{}, nil
}

// removeFiles removes what a deleted Member left where its panes ran: its
// agent directory and, on a pane server that ran it as a user of its own,
// that user's processes, home and temporary directory. A failure is
// logged, and never holds the Member's deletion: its directory is one of
// this Member incarnation's alone (home), so a new Member of the name never
// reaches it.
func (s *sharedRuntime) removeFiles(ctx context.Context, m *fleetv1alpha1.Member) {
	dir := ""
	if s.agentDir != "" {
		dir = s.home(m).Dir
	}
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	files, err := s.files(hctx, m)
	if err == nil {
		err = files.Remove(hctx, dir)
	}
	if err != nil {
		log.FromContext(ctx).Info("Removing the member's files", "member", klog.KObj(m), "error", err.Error())
	}
}

func (s *sharedRuntime) forget(types.UID) {}

// suspendBlocker: the shared pane server has no Pod to give up.
func (s *sharedRuntime) suspendBlocker(Worker) string {
	return "the member runs on the shared pane server; only a member in a Pod of its own is suspended"
}

// sharedHost remembers what the shared pane server does beyond herdr.
type sharedHost struct {
	mu    sync.Mutex
	known bool
	host  panehost.HostInfo
}

// info asks the shared pane server once what it does, and says so in the
// log when its members are not kept apart; ok is false while it cannot be
// asked.
func (h *sharedHost) info(ctx context.Context, panes PaneClient) (panehost.HostInfo, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.known {
		return h.host, true
	}
	c, ok := panes.(panehost.Caller)
	if !ok {
		return panehost.HostInfo{}, false
	}
	info, err := panehost.Info(ctx, c)
	if err != nil {
		return panehost.HostInfo{}, false
	}
	h.known, h.host = true, info
	if !info.Users {
		log.FromContext(ctx).Info("Members on the shared pane server share one Unix user and can act as each other; give it root or CAP_SETUID and CAP_SETGID, or run members in pods", "paneServer", socketOf(panes))
	}
	return info, true
}

// podRuntime runs each member in a Pod of its own, whose pane host fleetd
// reaches over mutual TLS.
type podRuntime struct {
	// hosts reaches the pane hosts; nil when this fleetd runs no pod
	// members.
	hosts *panehost.Hosts
}

func (p *podRuntime) panes(m *fleetv1alpha1.Member) (PaneClient, error) {
	c, err := p.host(m)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// host is the client of m's pane host.
func (p *podRuntime) host(m *fleetv1alpha1.Member) (*herdr.Client, error) {
	if p.hosts == nil {
		return nil, fmt.Errorf("%w: member %s runs in a pod, and this fleetd runs no pod members", panehost.ErrNoPaneHost, m.Name)
	}
	return p.hosts.For(m)
}

// files are reached through the pane host, which keeps them.
func (p *podRuntime) files(_ context.Context, m *fleetv1alpha1.Member) (AgentFiles, error) {
	c, err := p.host(m)
	if err != nil {
		return nil, err
	}
	return panehost.Remote{Client: c}, nil
}

// home is the one directory on the Pod's workspace.
func (p *podRuntime) home(*fleetv1alpha1.Member) agentHome {
	return agentHome{Dir: podAgentDir, HookCommand: podHookCommand}
}

// gateway is the pane host's forwarder, which adds the Pod's own token: a
// pod member has no token Secret.
func (p *podRuntime) gateway(context.Context, *MemberReconciler, *memberScope) (string, string, error) {
	return podMCPURL, "", nil
}

// prepare refuses a Pod that asks for more than a Member may, and brings
// the member's Pod up.
func (p *podRuntime) prepare(ctx context.Context, r *MemberReconciler, s *memberScope, w Worker) (bool, ctrl.Result, error) {
	if errs := memberPodOutOfBounds(s.member.Spec.Pod); len(errs) > 0 {
		result, err := r.refusePod(ctx, s, errs.ToAggregate())
		return false, result, err
	}
	return r.reconcilePod(ctx, s, w)
}

func (p *podRuntime) isolation(_ context.Context, m *fleetv1alpha1.Member, _ PaneClient) *isolation {
	return &isolation{reason: fleetv1alpha1.ReasonOwnPod, message: "the member runs in pod " + m.Status.PodName + " of its own"}
}

// teardown deletes the member's Pod now, ending the agent without waiting
// for the garbage collector; its panes and credentials go with it.
func (p *podRuntime) teardown(ctx context.Context, r *MemberReconciler, m *fleetv1alpha1.Member) (bool, ctrl.Result, error) {
	if err := r.deletePods(ctx, m); err != nil {
		return false, ctrl.Result{}, err
	}
	return true, ctrl.Result{}, nil
}

func (p *podRuntime) forget(uid types.UID) {
	if p.hosts != nil {
		p.hosts.Forget(uid)
	}
}

// suspendBlocker: a suspended member's Pod is deleted, and only a
// workspace claim keeps the workspace and the agent's session (on
// podAgentDir) once it is; an emptyDir goes with its Pod.
func (p *podRuntime) suspendBlocker(w Worker) string {
	if w.Pod == nil || w.Pod.Workspace == nil || w.Pod.Workspace.VolumeClaim == nil {
		return "the member's workspace is an emptyDir, which would be lost with its Pod, and the agent's session with it; " +
			"give it a claim (spec.pod.workspace.volumeClaim, or its Profile's) to let it be suspended"
	}
	return ""
}
