package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/controllers"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway"
	"github.com/fleetd/fleetd/gateway/rotation"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/herdr/detect"
	"github.com/fleetd/fleetd/internal/fleetcache"
	"github.com/fleetd/fleetd/internal/scheme"
	"github.com/fleetd/fleetd/panehost"
	"github.com/fleetd/fleetd/shard"
)

// options are fleetd's settings.
type options struct {
	controllers, gateway bool

	herdrSocket string
	namespace   string

	gatewayBind      string
	gatewayURL       string
	staticTokens     string
	staticNamespace  string
	maxTimeout       time.Duration
	progressInterval time.Duration
	teamPolicy       gateway.TeamPolicy
	processTools     bool
	teamTools        bool

	metricsAddr   string
	probeAddr     string
	leaderElect   bool
	leaderElectNS string

	shards             int
	shardLeaseNS       string
	shardLeaseDuration time.Duration
	shardRenewDeadline time.Duration
	shardRenewPeriod   time.Duration
	replicaID          string

	maxHops            int
	maxQueue           int
	maxSpawns          int
	maxMembers         int
	maxHeldCalls       int
	maxStreams         int
	retention          time.Duration
	cancelledRetention time.Duration
	maxQueuePerSender  int
	maxSenderMessages  int
	maxSenderBytes     int64
	senderRate         float64
	senderBurst        int
	kubeQPS            float64
	kubeBurst          int
	memberParallel     int
	queueParallel      int

	agentDir        string
	hookCommand     string
	screenManifests string
	screenInterval  time.Duration

	defaultRuntime string
	workerImage    string
	toolsImage     string
	podPullPolicy  string
	podGatewayURL  string
	paneHostCA     string
	paneHostPort   int
	fleetdNS       string
}

func (o *options) bind(fs *flag.FlagSet) {
	fs.BoolVar(&o.controllers, "controllers", true, "Run the Member and Delegation controllers.")
	fs.BoolVar(&o.gateway, "gateway", true, "Run the MCP gateway.")
	fs.StringVar(&o.herdrSocket, "herdr-socket", "", "herdr's socket (default: $HERDR_SOCKET_PATH, else herdr's own default path).")
	fs.StringVar(&o.namespace, "namespace", "", "Watch only this namespace (default: all).")
	fs.StringVar(&o.gatewayBind, "gateway-bind", gateway.DefaultAddr, "Address the gateway serves MCP (/mcp), REST, /healthz, /readyz and /metrics on.")
	fs.StringVar(&o.gatewayURL, "gateway-url", "", "The gateway's MCP URL as panes reach it (default: http://<gateway-bind>/mcp).")
	fs.StringVar(&o.staticTokens, "static-tokens", "", "namespace/name of a Secret labelled fleet.fleetd.dev/static-token whose keys are principal names and values tokens.")
	fs.StringVar(&o.staticNamespace, "static-namespace", gateway.DefaultNamespace, "Namespace static-token principals act in.")
	fs.DurationVar(&o.maxTimeout, "max-timeout", gateway.DefaultMaxTimeout, "Cap on a held call's timeoutMs.")
	fs.DurationVar(&o.progressInterval, "progress-interval", gateway.DefaultProgressInterval, "How often a held call sends a progress notification.")
	fs.BoolVar(&o.teamPolicy.NonLeadCanAdd, "team-non-lead-can-add", false, "Let team members that are not the lead add members to their team with team_manage.")
	fs.BoolVar(&o.teamPolicy.NonLeadCanRemove, "team-non-lead-can-remove", false, "Let team members that are not the lead remove members (never the lead) from their team with team_manage.")
	fs.BoolVar(&o.teamTools, "team-tools", true, "Serve the team_* tools.")
	fs.BoolVar(&o.processTools, "process-tools", false, "Serve the process_* tools, which run commands on the gateway's host.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "Address of the controllers' /metrics: fleetd's fleetd_delegation_*, fleetd_member*, fleetd_pane_host_* and controller-runtime's own (0 disables; the gateway serves its fleetd_gateway_* at its own /metrics).")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", "", "Controller health probe address (empty disables).")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader among controller replicas.")
	fs.StringVar(&o.leaderElectNS, "leader-election-namespace", "", "Namespace of the leader election lease.")
	fs.IntVar(&o.shards, "shards", shard.DefaultCount, "Shards the fleet is split into: a Member's shard is a hash of its namespace and name, labelled fleet.fleetd.dev/shard on it, its Pod and Secrets and every Delegation to it. The same on every replica.")
	fs.StringVar(&o.shardLeaseNS, "shard-lease-namespace", "", "Namespace of the shards' Leases. When set, replicas share the shards out: each runs the controllers of the shards it holds a Lease for, with caches of those shards only (instead of --leader-elect). Empty runs every shard here.")
	fs.DurationVar(&o.shardLeaseDuration, "shard-lease-duration", shard.DefaultLeaseDuration, "How long a replica's Lease stays unrenewed before the others take its shards over.")
	fs.DurationVar(&o.shardRenewDeadline, "shard-renew-deadline", shard.DefaultRenewDeadline, "How long a replica tries to renew its Lease before it stops its shards' controllers; shorter than --shard-lease-duration.")
	fs.DurationVar(&o.shardRenewPeriod, "shard-renew-period", shard.DefaultRenewPeriod, "How often a replica renews its Lease and looks at the shards'.")
	fs.StringVar(&o.replicaID, "replica-id", os.Getenv("POD_NAME"), "This replica's name among those sharing the shards; one process at a time may run with it (default: $POD_NAME, else the host name with a suffix of the process's own).")
	fs.IntVar(&o.maxHops, "max-hops", int(delegation.DefaultPolicy.MaxHops), "Messages one chain may hold without a primary's message in between (1 to 1000): a member's message sent while it works on one, and a reply carried back to a member's pane, are each a hop further. The gateway refuses a longer chain with hop_limit; the controllers fail a carried reply past it.")
	fs.IntVar(&o.maxQueue, "max-queue", gateway.DefaultMaxQueue, "Messages that may wait in one member's queue; one more is refused with queue_full (negative: no bound).")
	fs.IntVar(&o.maxQueuePerSender, "max-queue-per-sender", gateway.DefaultMaxQueuePerSender, "Messages from one sender that may wait in one member's queue, so that one sender cannot keep a queue full for every other; one more is refused with queue_full (negative: no bound).")
	fs.IntVar(&o.maxSenderMessages, "max-sender-messages", gateway.DefaultMaxSenderMessages, "Delegations one sender may keep in a namespace, in any phase, until retention deletes them; one more is refused with sender_limit (negative: no bound).")
	fs.Int64Var(&o.maxSenderBytes, "max-sender-bytes", gateway.DefaultMaxSenderBytes, "Bytes (content and images) one sender's kept Delegations in a namespace may hold; a message past it is refused with sender_limit (negative: no bound).")
	fs.Float64Var(&o.senderRate, "sender-rate", gateway.DefaultSenderRate, "Messages a second one principal may send through the gateway; more are refused with rate_limited (negative: no bound).")
	fs.IntVar(&o.senderBurst, "sender-burst", gateway.DefaultSenderBurst, "Messages one principal may send at once above --sender-rate (a broadcast is one per recipient).")
	fs.IntVar(&o.maxSpawns, "max-spawns", gateway.DefaultMaxSpawns, "Members one principal may answer for through the gateway: those it spawned, those they spawned, and a lead's team; one more spawn is refused with spawn_limit (negative: no bound).")
	fs.IntVar(&o.maxHeldCalls, "max-held-calls", gateway.DefaultMaxHeldCalls, "Calls one principal may hold open at once (bridge_send, bridge_ask waiting for an outcome); one more is refused with throttled (negative: no bound).")
	fs.IntVar(&o.maxStreams, "max-dashboard-streams", gateway.DefaultMaxDashboardStreams, "Dashboard streams (fleet views and member pages) one principal may keep open at once; one more is refused with 429 (negative: no bound).")
	fs.IntVar(&o.maxMembers, "max-members", gateway.DefaultMaxMembers, "Members a namespace may hold for the gateway to spawn another (negative: no bound). A ResourceQuota on count/members.fleet.fleetd.dev is the API server's bound beneath it.")
	fs.DurationVar(&o.retention, "delegation-retention", delegation.DefaultPolicy.Retention, "How long a settled Delegation stays after its last change before it is deleted (0 keeps them all). An outcome its sender has not collected with bridge_poll stays until bridge_ack.")
	fs.DurationVar(&o.cancelledRetention, "cancelled-retention", delegation.DefaultPolicy.CancelledRetention, "How long a cancelled Delegation stays after its last change, when shorter than --delegation-retention, so that sending and cancelling again and again does not keep a day of messages. An outcome its sender has not collected with bridge_poll stays until bridge_ack.")
	fs.Float64Var(&o.kubeQPS, "kube-api-qps", -1, "Client-side limit on requests per second to the API server, per resource type. Negative: no client-side limit, the API server's priority and fairness decides (controller-runtime's default).")
	fs.IntVar(&o.kubeBurst, "kube-api-burst", 100, "Requests above --kube-api-qps allowed at once, when it is positive.")
	fs.IntVar(&o.memberParallel, "member-concurrency", 16, "Members reconciled in parallel.")
	fs.StringVar(&o.agentDir, "agent-state-dir", controllers.DefaultAgentDir(), "Where each Member of a known agent (Claude Code, Codex) gets a directory of its own: the agent's configuration, seeded so it starts unattended, and its hooks' record. herdr's panes must reach it at the same path.")
	fs.StringVar(&o.hookCommand, "hook-command", "", "The command agents' hooks run to report their status, as herdr's panes reach it (default: this fleetd binary with 'hook').")
	fs.StringVar(&o.screenManifests, "screen-manifests", "", "Directory of screen manifests (<agent>.toml, herdr's format) that replace fleetd's built-in rules for reading agents' screens.")
	fs.DurationVar(&o.screenInterval, "screen-interval", controllers.DefaultScreenInterval, "How often the screens of agents fleetd has screen rules for are read.")
	fs.IntVar(&o.queueParallel, "delegation-concurrency", 16, "Member queues the injector works on in parallel (each delivery holds a worker for herdr's 300 ms prompt delay).")
	fs.StringVar(&o.defaultRuntime, "default-runtime", string(fleetv1alpha1.RuntimeShared), "Where Members run that do not say (neither they nor their Profile set runtime): Shared (panes of the pane server beside fleetd) or Pod (a Pod of their own each).")
	fs.StringVar(&o.workerImage, "worker-image", "fleetd-worker:dev", "The image a pod member's agent runs in unless its pod names one: the agent CLIs with node, git and a shell.")
	fs.StringVar(&o.toolsImage, "tools-image", "fleetd:dev", "fleetd's own image, whose binaries (the pane host, the hook command) an init container brings into every member Pod.")
	fs.StringVar(&o.podPullPolicy, "member-image-pull-policy", string(corev1.PullIfNotPresent), "Pull policy of the worker and tools images in member Pods.")
	fs.StringVar(&o.podGatewayURL, "pod-gateway-url", "", "The gateway's base URL as member Pods reach it (default: --gateway-url without its path).")
	fs.StringVar(&o.paneHostCA, "pane-host-ca", "", "namespace/name of the Secret with the CA that mints member Pods' pane host credentials; made on first start. Empty runs no pod members.")
	fs.IntVar(&o.paneHostPort, "pane-host-port", panehost.DefaultPort, "The TLS port of member Pods' pane hosts.")
	fs.StringVar(&o.fleetdNS, "fleetd-namespace", os.Getenv("POD_NAMESPACE"), "The namespace fleetd's own pods (labelled app.kubernetes.io/name=fleetd) run in: a NetworkPolicy in each namespace with member Pods lets only them reach the pane hosts (empty makes none).")
}

// leaseLabel selects fleetd's Leases.
func leaseLabel() labels.Requirement {
	req, err := labels.NewRequirement(fleetv1alpha1.LabelLease, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return *req
}

// podGateway is the gateway's base URL as member Pods reach it.
func (o *options) podGateway() string {
	if o.podGatewayURL != "" {
		return o.podGatewayURL
	}
	u, err := url.Parse(o.mcpURL())
	if err != nil {
		return o.mcpURL()
	}
	u.Path, u.RawQuery = "", ""
	return u.String()
}

func (o *options) mcpURL() string {
	if o.gatewayURL != "" {
		return o.gatewayURL
	}
	host, port, err := net.SplitHostPort(o.gatewayBind)
	if err != nil {
		return "http://" + o.gatewayBind + "/mcp"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/mcp"
}

// hookArgv is the command agents' hooks run: --hook-command split into
// words, or this binary with "hook".
func (o *options) hookArgv() ([]string, error) {
	if o.hookCommand != "" {
		return strings.Fields(o.hookCommand), nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding fleetd's own binary for agents' hooks (set --hook-command): %w", err)
	}
	return []string{exe, "hook"}, nil
}

// restConfig is cfg with fleetd's client-side throttling, whichever way cfg
// was loaded. A kubeconfig loaded by client-go would otherwise throttle at
// client-go's default of 5 requests per second per resource type: every
// message costs several writes, and a member's status writes queued behind
// each other for hundreds of milliseconds.
func (o *options) restConfig(cfg *rest.Config) (*rest.Config, error) {
	if o.kubeQPS == 0 {
		return nil, fmt.Errorf("--kube-api-qps=0: want a positive limit, or a negative value for none")
	}
	if o.kubeBurst < 1 {
		return nil, fmt.Errorf("--kube-api-burst=%d: must be at least 1", o.kubeBurst)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(o.kubeQPS), o.kubeBurst
	return cfg, nil
}

// start runs fleetd on cfg until ctx ends.
func start(ctx context.Context, cfg *rest.Config, o options) error {
	if !o.controllers && !o.gateway {
		return fmt.Errorf("nothing to run: --controllers=false and --gateway=false")
	}
	if o.retention < 0 {
		return fmt.Errorf("--delegation-retention=%v: must be 0 (keep every Delegation) or a positive duration", o.retention)
	}
	if o.maxHops < 1 || o.maxHops > 1000 {
		return fmt.Errorf("--max-hops=%d: must be between 1 and 1000", o.maxHops)
	}
	for name, v := range map[string]int64{
		"--max-queue": int64(o.maxQueue), "--max-queue-per-sender": int64(o.maxQueuePerSender), "--max-sender-messages": int64(o.maxSenderMessages),
		"--max-sender-bytes": o.maxSenderBytes, "--sender-burst": int64(o.senderBurst), "--max-spawns": int64(o.maxSpawns), "--max-members": int64(o.maxMembers),
		"--max-held-calls": int64(o.maxHeldCalls), "--max-dashboard-streams": int64(o.maxStreams),
	} {
		if v == 0 || (name == "--sender-burst" && v < 0) {
			return fmt.Errorf("%s=%d: want a positive bound, or a negative value for none", name, v)
		}
	}
	if o.senderRate == 0 {
		return fmt.Errorf("--sender-rate=0: want a positive rate, or a negative value for none")
	}
	if o.cancelledRetention < 0 {
		return fmt.Errorf("--cancelled-retention=%v: must be 0 (as --delegation-retention) or a positive duration", o.cancelledRetention)
	}
	cfg, err := o.restConfig(cfg)
	if err != nil {
		return err
	}
	stopTracing, err := setUpTracing(ctx, os.Getenv)
	if err != nil {
		return err
	}
	defer stopTracing()
	if o.shards < 1 || o.shards > 1024 {
		return fmt.Errorf("--shards=%d: must be between 1 and 1024", o.shards)
	}
	sharded := o.shardLeaseNS != "" && o.controllers
	if sharded && o.leaderElect {
		return fmt.Errorf("--leader-elect and --shard-lease-namespace: the shards' Leases elect an owner per shard; set one of them")
	}
	cacheOpts := fleetcache.Options()
	if sharded || !o.controllers {
		// The controllers run on caches of their shards, or elsewhere:
		// the gateway alone reads this cache's Delegations.
		cacheOpts = fleetcache.GatewayOptions()
	}
	if o.namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{o.namespace: {}}
	}
	if sharded {
		// The shards' Leases, watched: the Keeper sees a replica stop
		// renewing without asking the API server.
		cacheOpts.ByObject[&coordinationv1.Lease{}] = cache.ByObject{
			Namespaces: map[string]cache.Config{o.shardLeaseNS: {}},
			Label:      labels.SelectorFromSet(nil).Add(leaseLabel()),
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme.New(),
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect && o.controllers && !sharded,
		LeaderElectionID:        "fleetd.fleet.fleetd.dev",
		LeaderElectionNamespace: o.leaderElectNS,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if o.probeAddr != "" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return err
		}
	}
	// Where the replicas are Pods of fleetd's namespace, their Pods are
	// cached: to free a gone replica's shards early, and to keep the
	// gateway's rotation (rotation.Keeper, set up with the gateway).
	var pods *replicaPods
	podName := os.Getenv("POD_NAME")
	if podName != "" && o.fleetdNS != "" {
		if pods, err = newReplicaPods(cfg, o.fleetdNS); err != nil {
			return err
		}
		if err := mgr.Add(pods); err != nil {
			return err
		}
	}
	// quiet tells the rotation how long a replica's Lease has gone
	// unrenewed; nil knows none (rotation.Keeper.Quiet).
	var quiet func(string, time.Time) (time.Duration, bool)
	socket := o.herdrSocket
	if socket == "" {
		if socket, err = herdr.DefaultSocketPath(); err != nil {
			return fmt.Errorf("finding herdr's socket: %w", err)
		}
	}
	runtime := fleetv1alpha1.Runtime(o.defaultRuntime)
	if runtime != fleetv1alpha1.RuntimeShared && runtime != fleetv1alpha1.RuntimePod {
		return fmt.Errorf("--default-runtime=%q: want %s or %s", o.defaultRuntime, fleetv1alpha1.RuntimeShared, fleetv1alpha1.RuntimePod)
	}
	// fleetd's metrics join controller-runtime's, served at
	// --metrics-bind-address; the gateway serves its own at /metrics.
	metrics, err := controllers.NewMetrics(ctrlmetrics.Registry)
	if err != nil {
		return fmt.Errorf("registering fleetd's metrics: %w", err)
	}
	shared := herdr.NewClient(socket)
	shared.OnError = metrics.PaneHostErrors(fleetv1alpha1.RuntimeShared)
	var ca *panehost.CA
	var hosts *panehost.Hosts
	if o.paneHostCA != "" {
		ns, name, ok := strings.Cut(o.paneHostCA, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--pane-host-ca=%q: want namespace/name", o.paneHostCA)
		}
		writer, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return err
		}
		if ca, err = panehost.LoadCA(ctx, mgr.GetAPIReader(), writer, types.NamespacedName{Namespace: ns, Name: name}); err != nil {
			return err
		}
		hosts = panehost.NewHosts(ca)
		hosts.Port = o.paneHostPort
		hosts.OnError = metrics.PaneHostErrors(fleetv1alpha1.RuntimePod)
	} else if runtime == fleetv1alpha1.RuntimePod {
		return fmt.Errorf("--default-runtime=Pod needs --pane-host-ca")
	}
	if o.controllers {
		hookCommand, err := o.hookArgv()
		if err != nil {
			return err
		}
		policy := delegation.DefaultPolicy
		policy.MaxHops = int32(o.maxHops)
		policy.Retention = o.retention
		policy.CancelledRetention = o.cancelledRetention
		ccfg := controllers.Config{
			Panes:          shared,
			PaneHosts:      hosts,
			CA:             ca,
			DefaultRuntime: runtime,
			Pods: controllers.PodSettings{
				WorkerImage:     o.workerImage,
				ToolsImage:      o.toolsImage,
				PullPolicy:      corev1.PullPolicy(o.podPullPolicy),
				GatewayURL:      o.podGateway(),
				Port:            o.paneHostPort,
				FleetdNamespace: o.fleetdNS,
				FleetdPodLabels: map[string]string{"app.kubernetes.io/name": "fleetd"},
			},
			MCPURL:            o.mcpURL(),
			Policy:            policy,
			MemberConcurrency: o.memberParallel,
			QueueConcurrency:  o.queueParallel,
			AgentDir:          o.agentDir,
			HookCommand:       hookCommand,
			ScreenManifests:   o.screenManifests,
			ScreenInterval:    o.screenInterval,
			Metrics:           metrics,
			Sharding:          controllers.Sharding{Count: o.shards},
		}
		if err := controllers.SetupShardLabels(mgr, o.shards); err != nil {
			return err
		}
		if !sharded {
			if err := controllers.SetupWithManager(ctx, mgr, ccfg); err != nil {
				return err
			}
		} else {
			// The controllers read across shards (a message another
			// shard's member was sent, a pool's warm Pods) from the
			// gateway's cache, which holds the whole fleet.
			runner := newShardControllers(cfg, o.namespace, mgr.GetLogger().WithName("shards"), func(ctx context.Context, sub ctrl.Manager, s controllers.Sharding) error {
				c := ccfg
				c.Sharding = s
				c.Sharding.Fleet = mgr.GetClient()
				return controllers.SetupWithManager(ctx, sub, c)
			})
			runner.stopped = metrics.ForgetState
			shardMetrics, err := shard.NewMetrics(ctrlmetrics.Registry, o.shards)
			if err != nil {
				return err
			}
			writer, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
			if err != nil {
				return err
			}
			keeper, err := keeperWith(o, runner, writer, mgr.GetLogger().WithName("shard-leases"), shardMetrics)
			if err != nil {
				return err
			}
			keeper.Reader = mgr.GetCache()
			if pods != nil && podName == keeper.Identity {
				// Replicas are Pods in fleetd's namespace: one whose Pod
				// is gone frees its shards without waiting out its Lease.
				keeper.Gone = pods.Gone
				quiet = keeper.QuietFor
			}
			if err := mgr.Add(keeper); err != nil {
				return err
			}
		}
	}
	if o.gateway {
		gopts := gateway.Options{
			Addr:             o.gatewayBind,
			Namespace:        o.staticNamespace,
			WatchNamespace:   o.namespace,
			Shards:           o.shards,
			MaxTimeout:       o.maxTimeout,
			ProgressInterval: o.progressInterval,
			Features: map[gateway.ToolNamespace]bool{
				gateway.ToolNamespaceTeam:    o.teamTools,
				gateway.ToolNamespaceProcess: o.processTools,
			},
			TeamPolicy:        o.teamPolicy,
			MaxHops:           int32(o.maxHops),
			MaxQueue:          o.maxQueue,
			MaxQueuePerSender: o.maxQueuePerSender,
			MaxSenderMessages: o.maxSenderMessages,
			MaxSenderBytes:    o.maxSenderBytes,
			SenderRate:        o.senderRate,
			SenderBurst:       o.senderBurst,
			MaxSpawns:         o.maxSpawns,
			MaxMembers:        o.maxMembers,
			// Per-principal bounds on what stays open.
			MaxHeldCalls:        o.maxHeldCalls,
			MaxDashboardStreams: o.maxStreams,
			// bridge_read reads members' terminals through herdr.
			Panes: shared,
		}
		// bridge_read explains a screen by the rules the controllers run.
		if gopts.Detectors, err = detect.Load(o.screenManifests); err != nil {
			return err
		}
		// Images a member sends, and its terminal, are read where its
		// agent runs.
		runtimes := controllers.NewRuntimes(shared, hosts, "", nil)
		gopts.MemberFiles = controllers.NewMemberFiles(runtimes)
		gopts.PaneHosts = gateway.PaneHostsFunc(func(m *fleetv1alpha1.Member) (gateway.PaneReader, error) {
			return runtimes.For(m)
		})
		if o.staticTokens != "" {
			ns, name, ok := strings.Cut(o.staticTokens, "/")
			if !ok || ns == "" || name == "" {
				return fmt.Errorf("--static-tokens=%q: want namespace/name", o.staticTokens)
			}
			gopts.StaticTokens = types.NamespacedName{Namespace: ns, Name: name}
		}
		g, err := gateway.New(mgr, gopts)
		if err != nil {
			return fmt.Errorf("setting up the gateway: %w", err)
		}
		if pods != nil {
			// Kept where the Pod has the gate (config/manager); a Pod
			// without it is left alone.
			rotationMetrics, err := rotation.NewMetrics(ctrlmetrics.Registry)
			if err != nil {
				return err
			}
			if err := mgr.Add(&rotation.Keeper{
				Client: mgr.GetClient(), Pods: pods.cache, Namespace: o.fleetdNS, Self: podName,
				Serving: g.Ready, Quiet: quiet, Policy: rotation.DefaultPolicy,
				Interval: rotation.DefaultInterval, Port: "gateway",
				HTTP: &http.Client{}, Clock: clock.RealClock{}, Log: mgr.GetLogger().WithName("rotation"),
				Metrics: rotationMetrics,
			}); err != nil {
				return err
			}
		}
	}
	return mgr.Start(ctx)
}
