package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Image is an OCI archive to import into every node's containerd.
type Image struct {
	Archive string
	Ref     string
	// Pinned marks it so that image garbage collection keeps it (the
	// sandbox image).
	Pinned bool
}

// Options are how Up runs, beside the Config of the cluster.
type Options struct {
	// Out gets progress lines.
	Out io.Writer
	// RelayCommand is the relay's argv; --netns, --listen and --target are
	// appended. It must outlive Up (a binary on disk, not a test).
	RelayCommand []string
	// Images are imported into every node before its kubelet starts; the
	// sandbox image and CoreDNS's are among them.
	Images []Image
}

// binaries Up runs from Config.BinDir.
var binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kube-network-policies", "kubectl"}

// Up starts the cluster of cfg and waits until every node is Ready and
// cluster DNS serves. A cluster already running with the same Config is
// reused; what is left of one that is not healthy (a bring-up killed
// halfway, a crashed daemon) is torn down first.
func Up(ctx context.Context, cfg Config, opts Options) (*Cluster, error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if err := CheckRoot(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var missing []string
	for _, b := range binaries {
		if fi, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s missing from %s: run `make cluster-bin`", strings.Join(missing, ", "), cfg.BinDir)
	}
	if len(opts.RelayCommand) == 0 {
		return nil, errors.New("no relay command given")
	}
	if err := ensurePackages(opts.Out); err != nil {
		return nil, err
	}
	if err := checkNoHostContainerd(hostContainerdSocket); err != nil {
		return nil, err
	}

	if running, err := Load(cfg.StateDir); err == nil {
		herr := running.Healthy(ctx)
		switch {
		case herr == nil && running.Nodes != nil && len(running.Nodes) == cfg.Nodes && running.Port == cfg.Port && running.Name == cfg.Name:
			fmt.Fprintf(opts.Out, "Reusing the running cluster (%d nodes); KUBECONFIG=%s\n", len(running.Nodes), running.Kubeconfig())
			return running, nil
		case herr == nil:
			return nil, fmt.Errorf("a cluster with %d nodes on port %d runs already; `make cluster-down` first to change it", len(running.Nodes), running.Port)
		default:
			fmt.Fprintf(opts.Out, "Tearing down what is left of an earlier cluster (%v)\n", herr)
			if err := Down(ctx, cfg.StateDir, opts.Out); err != nil {
				return nil, err
			}
		}
	} else if !errors.Is(err, ErrNoCluster) {
		return nil, err
	}
	if entries, _ := (Journal{path: NewLayout(cfg).JournalPath()}).Load(); len(entries) > 0 {
		// A bring-up killed before it saved its configuration.
		if err := Down(ctx, cfg.StateDir, opts.Out); err != nil {
			return nil, err
		}
	}
	if exists(filepath.Join(netnsDir, cfg.Name)) {
		return nil, fmt.Errorf("a network namespace %s exists that %s has no record of: delete it (ip netns delete %s) or choose another name", cfg.Name, cfg.StateDir, cfg.Name)
	}

	l := NewLayout(cfg)
	b := &bringUp{l: l, opts: opts, start: time.Now()}
	if err := b.run(ctx); err != nil {
		return nil, fmt.Errorf("%w (logs in %s; `make cluster-down` undoes what was done)", err, l.LogDir())
	}
	return &Cluster{Layout: l}, nil
}

type bringUp struct {
	l     Layout
	opts  Options
	h     *host
	start time.Time
}

func (b *bringUp) step(format string, args ...any) {
	fmt.Fprintf(b.opts.Out, "  %5.1fs  %s\n", time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

func (b *bringUp) run(ctx context.Context) error {
	l := b.l
	if err := os.MkdirAll(l.StateDir, 0o755); err != nil {
		return err
	}
	// Logs of an earlier cluster go; everything else of it went at its
	// teardown.
	_ = os.RemoveAll(l.LogDir())
	if err := os.MkdirAll(l.LogDir(), 0o755); err != nil {
		return err
	}
	h, err := newHost(l)
	if err != nil {
		return err
	}
	b.h = h
	// The cgroups first: every daemon is born in one.
	if err := h.journal.Append(Entry{Op: OpCgroups, Path: l.CgroupRoot(), Hierarchies: hierarchyPoints(h.cgroups)}); err != nil {
		return err
	}
	if err := l.saveConfig(); err != nil {
		return err
	}
	for _, cg := range append([]string{l.controlPlaneCgroup()}, runtimeCgroups(l)...) {
		if err := ensureCgroup(h.cgroups, cg); err != nil {
			return err
		}
	}
	// The machine's values go in its record before this cluster changes
	// any (the namespace makes /run/netns).
	if err := h.joinMachine(); err != nil {
		return err
	}
	if err := h.createNetns(); err != nil {
		return err
	}
	if err := l.writePKI(); err != nil {
		return fmt.Errorf("making certificates: %w", err)
	}
	if err := l.writeConfigs(); err != nil {
		return err
	}
	b.step("network namespace %s, cgroups and certificates ready", l.Name)

	// The nodes' runtimes come up and take their images while the control
	// plane starts.
	var wg sync.WaitGroup
	runtimeErr := make([]error, len(l.Nodes))
	for i, n := range l.Nodes {
		wg.Go(func() { runtimeErr[i] = b.startRuntime(ctx, n) })
	}

	if _, err := h.start(daemon{name: "etcd", path: l.bin("etcd"), args: l.etcdArgs(), netns: l.NetnsPath(), cgroup: l.controlPlaneCgroup(), log: l.logFile("etcd")}); err != nil {
		return err
	}
	if err := b.waitHTTP(ctx, "etcd", "http://127.0.0.1:"+strconv.Itoa(etcdClientPort)+"/health", 60*time.Second); err != nil {
		return err
	}
	b.step("etcd healthy")
	if _, err := h.start(daemon{name: "kube-apiserver", path: l.bin("kube-apiserver"), args: l.apiserverArgs(), netns: l.NetnsPath(), cgroup: l.controlPlaneCgroup(), log: l.logFile("kube-apiserver")}); err != nil {
		return err
	}
	relayArgs := append(append([]string{}, b.opts.RelayCommand[1:]...),
		"--netns="+l.NetnsPath(), "--listen=127.0.0.1:"+strconv.Itoa(l.Port), "--target=127.0.0.1:"+strconv.Itoa(l.Port))
	if err := checkPortFree(l.Port); err != nil {
		return err
	}
	if _, err := h.start(daemon{name: "relay", path: b.opts.RelayCommand[0], args: relayArgs, cgroup: l.controlPlaneCgroup(), log: l.logFile("relay")}); err != nil {
		return err
	}
	cl := &Cluster{Layout: l}
	cfg, err := cl.RESTConfig()
	if err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 120*time.Second, true, func(ctx context.Context) (bool, error) {
		return apiReady(ctx, cfg) == nil, nil
	}); err != nil {
		return fmt.Errorf("kube-apiserver not ready through the relay on 127.0.0.1:%d: %w", l.Port, err)
	}
	b.step("kube-apiserver ready at %s", l.Server())
	for _, d := range []daemon{
		{name: "kube-controller-manager", path: l.bin("kube-controller-manager"), args: l.kcmArgs()},
		{name: "kube-scheduler", path: l.bin("kube-scheduler"), args: l.schedulerArgs()},
		{name: "kube-proxy", path: l.bin("kube-proxy"), args: []string{"--config=" + l.controlPlanePath("kube-proxy.yaml")}},
	} {
		d.netns, d.cgroup, d.log = l.NetnsPath(), l.controlPlaneCgroup(), l.logFile(d.name)
		if _, err := h.start(d); err != nil {
			return err
		}
	}
	wg.Wait()
	if err := errors.Join(runtimeErr...); err != nil {
		return err
	}
	b.step("containerd on %d nodes, with %d images each", len(l.Nodes), len(b.opts.Images))
	if err := b.kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", l.controlPlanePath("netpol-rbac.yaml")); err != nil {
		return fmt.Errorf("applying the NetworkPolicy engine's RBAC: %w", err)
	}
	for _, n := range l.Nodes {
		if err := b.h.startNode(n); err != nil {
			return err
		}
	}
	if err := b.kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", l.controlPlanePath("coredns.yaml")); err != nil {
		return fmt.Errorf("applying CoreDNS: %w", err)
	}
	if err := cl.waitNodesReady(ctx, 120*time.Second); err != nil {
		return err
	}
	b.step("%d nodes Ready", len(l.Nodes))
	if err := cl.waitDeploymentAvailable(ctx, "kube-system", "coredns", 120*time.Second); err != nil {
		return err
	}
	b.step("cluster DNS serving at %s", DNSServiceIP)
	return os.WriteFile(l.completePath(), nil, 0o644)
}

func runtimeCgroups(l Layout) []string {
	var out []string
	for _, n := range l.Nodes {
		out = append(out, l.runtimeCgroup(n))
	}
	return out
}

func hierarchyPoints(hs []hierarchy) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Point
	}
	return out
}

func (l Layout) bin(name string) string     { return filepath.Join(l.BinDir, name) }
func (l Layout) logFile(name string) string { return filepath.Join(l.LogDir(), name+".log") }

// writeConfigs writes every daemon's configuration file.
func (l Layout) writeConfigs() error {
	files := map[string]string{
		l.controlPlanePath("kube-proxy.yaml"):  l.renderKubeProxy(),
		l.controlPlanePath("coredns.yaml"):     renderCoreDNS(min(2, len(l.Nodes))),
		l.controlPlanePath("netpol-rbac.yaml"): renderNetpolRBAC(),
	}
	for _, n := range l.Nodes {
		cni, err := renderCNI(n)
		if err != nil {
			return err
		}
		files[n.containerdConfig()] = renderContainerd(n)
		files[n.kubeletConfig()] = l.renderKubelet(n)
		files[filepath.Join(n.cniConfDir(), "10-"+n.Name+".conflist")] = cni
	}
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startRuntime starts node n's containerd and imports the images.
func (b *bringUp) startRuntime(ctx context.Context, n NodeLayout) error {
	if err := b.h.startContainerd(ctx, n); err != nil {
		return err
	}
	for _, img := range b.opts.Images {
		if err := importImage(ctx, n, img); err != nil {
			return err
		}
	}
	return nil
}

func (h *host) startContainerd(ctx context.Context, n NodeLayout) error {
	l := h.layout
	if _, err := h.start(daemon{
		name: n.Name + "/containerd", path: "containerd", args: []string{"--config=" + n.containerdConfig()},
		netns: l.NetnsPath(), cgroup: l.runtimeCgroup(n), log: l.logFile(n.Name + "-containerd"),
	}); err != nil {
		return err
	}
	return waitCRI(ctx, n.ContainerdSocket(), 60*time.Second)
}

// waitCRI waits until the CRI at socket answers a Version request. The
// socket takes connections at once, but the CRI plugin answers "not
// initialized yet" until containerd has recovered its containers' state,
// which takes a second once a node had some tens of pods; a kubelet
// started before then exits.
func waitCRI(ctx context.Context, socket string, timeout time.Duration) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	cri := runtimeapi.NewRuntimeServiceClient(conn)
	// answer is the CRI's own last answer; a call that ran out of time
	// (its own 2 s, or the whole wait's) is no answer and must not hide it.
	// gRPC may end a call at its deadline before the context says so,
	// so the call's status tells, not the context.
	var answer, silence error
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := cri.Version(rctx, &runtimeapi.VersionRequest{})
		switch {
		case err == nil:
			return true, nil
		case status.Code(err) == codes.DeadlineExceeded || status.Code(err) == codes.Canceled:
			silence = err
		default:
			answer = err
		}
		return false, nil
	})
	if err != nil {
		switch {
		case answer != nil:
			return fmt.Errorf("the CRI at %s is not ready after %s: its last answer: %v", socket, timeout, answer)
		case silence != nil:
			return fmt.Errorf("the CRI at %s does not answer after %s: %v", socket, timeout, silence)
		}
		return fmt.Errorf("the CRI at %s does not answer after %s", socket, timeout)
	}
	return nil
}

// startNode starts node n's kubelet and its NetworkPolicy engine, in the
// node's cgroup: a node that dies takes both.
func (h *host) startNode(n NodeLayout) error {
	l := h.layout
	if err := h.startKubelet(n); err != nil {
		return err
	}
	_, err := h.start(daemon{
		name: n.Name + "/kube-network-policies", path: l.bin("kube-network-policies"), args: l.netpolArgs(n),
		netns: l.NetnsPath(), cgroup: l.runtimeCgroup(n), log: l.logFile(n.Name + "-kube-network-policies"),
	})
	return err
}

// importImage imports an OCI archive into node n's containerd, in the
// namespace the CRI uses, and pins it if asked.
func importImage(ctx context.Context, n NodeLayout, img Image) error {
	ctr := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.ContainerdSocket(), "--namespace", "k8s.io"}, args...)...)
		cmd.Env = daemonEnv()
		cmd.SysProcAttr = diesWithUs()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("ctr %s on %s: %w: %s", strings.Join(args, " "), n.Name, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := ctr("images", "import", img.Archive); err != nil {
		return err
	}
	if img.Pinned {
		return ctr("images", "label", img.Ref, "io.cri-containerd.pinned=pinned")
	}
	return nil
}

// waitHTTP polls url inside the cluster's namespace until it answers 200.
func (b *bringUp) waitHTTP(ctx context.Context, what, url string, timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return DialInNetns(ctx, b.l.NetnsPath(), addr)
		},
	}}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s not healthy after %s: see %s", what, timeout, b.l.logFile(what))
	}
	return nil
}

func (b *bringUp) kubectl(ctx context.Context, args ...string) error {
	// Its discovery cache too stays in the state directory, not in ~/.kube.
	cmd := exec.CommandContext(ctx, b.l.bin("kubectl"), append([]string{"--kubeconfig=" + b.l.Kubeconfig(), "--cache-dir=" + b.l.path("kube-cache")}, args...)...)
	cmd.SysProcAttr = diesWithUs()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func checkPortFree(port int) error {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return fmt.Errorf("the relay needs 127.0.0.1:%d, which is in use (choose another with CLUSTER_PORT): %w", port, err)
	}
	return ln.Close()
}

// waitNodesReady waits until every node of the layout is Ready.
func (c *Cluster) waitNodesReady(ctx context.Context, timeout time.Duration) error {
	kc, err := c.Client()
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready := 0
		for i := range nodes.Items {
			if nodeReady(&nodes.Items[i]) {
				ready++
			}
		}
		last = fmt.Sprintf("%d of %d nodes Ready", ready, len(c.Nodes))
		return ready == len(c.Nodes), nil
	})
	if err != nil {
		return fmt.Errorf("nodes not Ready after %s (%s): see the kubelet logs in %s", timeout, last, c.LogDir())
	}
	return nil
}

func (c *Cluster) waitDeploymentAvailable(ctx context.Context, ns, name string, timeout time.Duration) error {
	kc, err := c.Client()
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := kc.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return d.Status.AvailableReplicas > 0 && d.Status.ObservedGeneration >= d.Generation, nil
	})
	if err != nil {
		return fmt.Errorf("deployment %s/%s not available after %s", ns, name, timeout)
	}
	return nil
}

func (h *host) startKubelet(n NodeLayout) error {
	l := h.layout
	_, err := h.start(daemon{
		name: n.Name + "/kubelet", path: l.bin("kubelet"), args: l.kubeletArgs(n),
		netns: l.NetnsPath(), cgroup: l.runtimeCgroup(n), log: l.logFile(n.Name + "-kubelet"),
	})
	return err
}
