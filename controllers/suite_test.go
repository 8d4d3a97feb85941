package controllers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/fleetcache"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

var (
	env *testenv.Env
	// scriptedAgent is the scripted agent binary, built once per run.
	scriptedAgent string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fleetd-ctrl")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scriptedAgent = filepath.Join(dir, "scripted-agent")
	build := exec.Command("go", "build", "-o", scriptedAgent, "github.com/fleetd/fleetd/hack/scriptedagent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the scripted agent:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	testenv.Main(m, &env, func() { os.RemoveAll(dir) })
}

// herdrServer is a herdr-compatible server on a short socket path.
type herdrServer struct {
	socket string
	srv    *paneserver.Server
	tune   []func(*paneserver.Options)
}

var socketSeq atomic.Int64

// startHerdr runs a pane server; tune adjusts its options.
func startHerdr(t testing.TB, tune ...func(*paneserver.Options)) *herdrServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "hd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &herdrServer{socket: filepath.Join(dir, fmt.Sprintf("h%d.sock", socketSeq.Add(1))), tune: tune}
	h.start(t)
	t.Cleanup(h.stop)
	return h
}

func (h *herdrServer) start(t testing.TB) {
	t.Helper()
	opts := paneserver.Options{SocketPath: h.socket, Shell: "/bin/sh", AgentSettle: 200 * time.Millisecond, AgentCommands: map[string]string{}}
	for _, f := range h.tune {
		f(&opts)
	}
	srv, err := paneserver.New(opts)
	if err != nil {
		t.Fatalf("starting the pane server: %v", err)
	}
	h.srv = srv
	go func() { _ = srv.Serve() }()
}

func (h *herdrServer) stop() {
	if h.srv != nil {
		_ = h.srv.Close()
		h.srv = nil
	}
}

func (h *herdrServer) client() *herdr.Client { return herdr.NewClient(h.socket) }

// controllerRun is one running manager with fleetd's controllers, watching
// one namespace so parallel runs never fight over the same objects.
type controllerRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startControllers runs the Member and Delegation controllers for namespace
// ns against herdr at socket.
func startControllers(t testing.TB, ns, socket string) *controllerRun {
	t.Helper()
	return startManager(t, env.Config, ns, socket, true)
}

// startInjectorOnly runs the Delegation controller without the Member
// controller, so Member status stays as it was: a stale view on purpose.
func startInjectorOnly(t testing.TB, ns, socket string) *controllerRun {
	t.Helper()
	return startManager(t, env.Config, ns, socket, false)
}

// startManager runs the controllers; tune adjusts the injector's policy.
func startManager(t testing.TB, cfg *rest.Config, ns, socket string, members bool, tune ...func(*delegation.Policy)) *controllerRun {
	t.Helper()
	return startManagerOn(t, cfg, ns, herdr.NewClient(socket), members, tune...)
}

// startManagerOn runs the controllers against panes.
func startManagerOn(t testing.TB, cfg *rest.Config, ns string, panes PaneClient, members bool, tune ...func(*delegation.Policy)) *controllerRun {
	t.Helper()
	policy := delegation.DefaultPolicy
	for _, f := range tune {
		f(&policy)
	}
	return runManager(t, cfg, ns, func(ctx context.Context, mgr ctrl.Manager) error {
		if members {
			return SetupWithManager(ctx, mgr, Config{
				Panes: panes, MCPURL: "http://127.0.0.1:1/mcp", Policy: policy,
				AgentDir: t.TempDir(), HookCommand: []string{"/bin/true"}, ScreenInterval: 100 * time.Millisecond,
			})
		}
		d := &DelegationReconciler{
			Client:   mgr.GetClient(),
			Panes:    panes,
			Recorder: mgr.GetEventRecorder("fleetd-delegation"),
			Clock:    clock.RealClock{},
			Policy:   policy,
		}
		return d.SetupWithManager(ctx, mgr)
	})
}

// runManager runs a manager with fleetd's cache options for namespace ns,
// set up by setup, until the test ends.
func runManager(t testing.TB, cfg *rest.Config, ns string, setup func(context.Context, ctrl.Manager) error) *controllerRun {
	t.Helper()
	cacheOpts := fleetcache.Options()
	cacheOpts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     env.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cacheOpts,
		Controller: config.Controller{SkipNameValidation: ptrTo(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := setup(ctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	run := &controllerRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(run.stop)
	return run
}

func (c *controllerRun) stop() {
	c.cancel()
	<-c.done
}

func ptrTo[T any](v T) *T { return &v }

// typeInto types text into the pane of a plain-command member the way the
// injector does: herdr's agent.prompt refuses agents it does not know.
func typeInto(panes PaneClient, paneID, text string) error {
	return typeMessage(context.Background(), panes, paneID, true, text)
}

// refusingPanes is herdr refusing every prompt that contains a marker, the
// way it answers when it cannot write to the pane (agent_prompt_failed);
// everything else reaches herdr.
type refusingPanes struct {
	PaneClient
	marker string
}

func (p refusingPanes) AgentPrompt(ctx context.Context, params herdr.AgentPromptParams) (*herdr.AgentInfo, error) {
	if strings.Contains(params.Text, p.marker) {
		return nil, &herdr.Error{Code: herdr.CodeAgentPromptFailed, Message: "failed to write to the pane"}
	}
	return p.PaneClient.AgentPrompt(ctx, params)
}

func getMember(t testing.TB, ns, name string) (*fleetv1alpha1.Member, error) {
	m := &fleetv1alpha1.Member{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m)
	return m, err
}

// waitReady waits for a Member to be Ready and returns it.
func waitReady(t testing.TB, ns, name string) *fleetv1alpha1.Member {
	t.Helper()
	var m *fleetv1alpha1.Member
	testutil.Eventually(t, "member "+name+" Ready", func() (bool, string) {
		var err error
		m, err = getMember(t, ns, name)
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady) && m.Status.PaneID != "", describe(m)
	})
	return m
}

func describe(m *fleetv1alpha1.Member) string {
	var conds []string
	for _, c := range m.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("phase=%s pane=%s agent=%s restarts=%d %s", m.Status.Phase, m.Status.PaneID, m.Status.AgentStatus, m.Status.Restarts, strings.Join(conds, " "))
}

func create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

func workspaces(t testing.TB, h *herdrServer) []herdr.WorkspaceInfo {
	t.Helper()
	snap, err := h.client().SessionSnapshot(context.Background())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return snap.Workspaces
}

func waitAgentStatus(t testing.TB, ns, name string, want fleetv1alpha1.AgentStatus) *fleetv1alpha1.Member {
	t.Helper()
	var m *fleetv1alpha1.Member
	testutil.Eventually(t, fmt.Sprintf("member %s agentStatus %s", name, want), func() (bool, string) {
		var err error
		m, err = getMember(t, ns, name)
		if err != nil {
			return false, err.Error()
		}
		return m.Status.AgentStatus == want, describe(m)
	})
	return m
}

func waitEvent(t testing.TB, ns, name, reason string) {
	t.Helper()
	testutil.Eventually(t, "event "+reason, func() (bool, string) {
		var list eventsv1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Reason == reason {
				return true, ""
			}
			seen = append(seen, e.Reason)
		}
		return false, strings.Join(seen, ",")
	})
}

// claudeStandIn writes an executable that herdr starts for agent.start
// kind claude: it runs body, known to herdr as claude by HERDR_AGENT.
func claudeStandIn(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexport HERDR_AGENT=claude\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}
