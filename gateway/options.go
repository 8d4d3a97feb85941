package gateway

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/herdr/detect"
	"github.com/fleetd/fleetd/shard"
)

// Defaults of Options.
const (
	DefaultAddr             = "127.0.0.1:8080"
	DefaultNamespace        = "default"
	DefaultMaxTimeout       = time.Hour
	DefaultProgressInterval = 15 * time.Second
	DefaultBodyReadTimeout  = 30 * time.Second
)

// Options configure a Gateway.
type Options struct {
	// Addr is the listen address of the MCP, REST, health and metrics
	// endpoints. Default 127.0.0.1:8080.
	Addr string
	// Namespace is where static principals act. Default "default".
	Namespace string
	// StaticTokens names a Secret labelled fleet.fleetd.dev/static-token
	// whose data keys are principal names and whose values are their tokens.
	// Empty disables static tokens.
	StaticTokens types.NamespacedName
	// WatchNamespace is the one namespace the manager's cache watches, ""
	// for all: the gateway's view of closed Delegations watches the same.
	WatchNamespace string
	// Shards is the shard count a Delegation is labelled by, with its
	// receiver's shard (fleet.fleetd.dev/shard), so that only that shard's
	// fleetd replica caches it. Default shard.DefaultCount.
	Shards int
	// MaxTimeout caps timeoutMs of held calls. Default one hour.
	MaxTimeout time.Duration
	// ProgressInterval is how often a held call sends a progress
	// notification, when its client gave a progress token. Default 15s.
	ProgressInterval time.Duration
	// Features switches tool namespaces on or off. A namespace missing here
	// takes its default: bridge always on, team on, process off.
	Features map[ToolNamespace]bool
	// TeamPolicy says who may use team_manage.
	TeamPolicy TeamPolicy
	// Clock stamps the times the gateway writes and runs held calls'
	// deadlines and progress ticks. Default the real clock.
	Clock clock.WithTickerAndDelayedExecution
	// BodyReadTimeout bounds how long a request may take to send its body.
	// Default 30s.
	BodyReadTimeout time.Duration
	// Panes reads members' terminals (bridge_read) on the shared pane
	// server; nil switches that off.
	Panes PaneReader
	// PaneHosts, when set, says where each member's terminal is: the
	// shared pane server, or its Pod's pane host.
	PaneHosts PaneHosts
	// MaxHops bounds a chain of messages: a member's message sent while it
	// works on one is a hop further than that one. Default
	// delegation.DefaultPolicy.MaxHops; at most 1000.
	MaxHops int32
	// MaxQueue bounds the messages waiting for one member. Default
	// DefaultMaxQueue; negative: no bound.
	MaxQueue int
	// MaxQueuePerSender bounds one sender's share of a member's queue: the
	// messages from it waiting for that member. Default
	// DefaultMaxQueuePerSender; negative: no bound.
	MaxQueuePerSender int
	// MaxSenderMessages bounds the Delegations one sender keeps in a
	// namespace, in any phase, until retention deletes them. Default
	// DefaultMaxSenderMessages; negative: no bound.
	MaxSenderMessages int
	// MaxSenderBytes bounds the bytes (content and images) of those
	// Delegations. Default DefaultMaxSenderBytes; negative: no bound.
	MaxSenderBytes int64
	// SenderRate is how many messages a second one principal may send,
	// SenderBurst how many at once. Defaults DefaultSenderRate and
	// DefaultSenderBurst; a negative rate: no bound.
	SenderRate  float64
	SenderBurst int
	// MaxSpawns bounds the members one principal answers for: those it
	// spawned, those they spawned, and a lead's team. Default
	// DefaultMaxSpawns; negative: no bound.
	MaxSpawns int
	// MaxMembers bounds the members of a namespace the gateway spawns up
	// to. Default DefaultMaxMembers; negative: no bound.
	MaxMembers int
	// Detectors are the screen rules by agent label, as the controllers
	// run them (bridge_read source detection explains them); nil loads
	// fleetd's built-in ones.
	Detectors map[string]*detect.Detector
	// MemberFiles reads the image files members send by path; nil refuses
	// image paths (images in the call still go).
	MemberFiles MemberFiles
	// MaxHeldCalls bounds the calls one principal holds open at once
	// (bridge_send, bridge_ask, bridge_cancel waiting on a message); one
	// more is refused with throttled. Default DefaultMaxHeldCalls;
	// negative: no bound.
	MaxHeldCalls int
	// MaxDashboardStreams bounds the dashboard streams one principal
	// keeps open at once; one more is refused with 429. Default
	// DefaultMaxDashboardStreams; negative: no bound.
	MaxDashboardStreams int
	// AuthFailureBurst is how many authentications one client address may
	// fail before it is refused with throttled, and AuthFailureInterval
	// how often it may then try once more. Default
	// identity.DefaultFailureBurst and identity.DefaultFailureInterval; a
	// negative burst: no throttle.
	AuthFailureBurst    int
	AuthFailureInterval time.Duration
}

// PaneHosts says which pane host a member's panes live on.
// *panehost.Hosts satisfies it with PaneHostsFunc.
type PaneHosts interface {
	For(m *fleetv1alpha1.Member) (PaneReader, error)
}

// PaneHostsFunc makes a func a PaneHosts.
type PaneHostsFunc func(m *fleetv1alpha1.Member) (PaneReader, error)

// For implements PaneHosts.
func (f PaneHostsFunc) For(m *fleetv1alpha1.Member) (PaneReader, error) { return f(m) }

// PaneReader is what the gateway needs of herdr. *herdr.Client satisfies it.
type PaneReader interface {
	PaneRead(ctx context.Context, p herdr.ReadParams) (*herdr.PaneRead, error)
	// AgentGet gives the terminal title and status the screen rules see.
	AgentGet(ctx context.Context, target string) (*herdr.AgentInfo, error)
}

// withDefaults fills in unset options.
func (o Options) withDefaults() Options {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Shards <= 0 {
		o.Shards = shard.DefaultCount
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = DefaultMaxTimeout
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.BodyReadTimeout <= 0 {
		o.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if o.MaxHops <= 0 {
		o.MaxHops = delegation.DefaultPolicy.MaxHops
	}
	o.MaxHops = min(o.MaxHops, 1000)
	for _, limit := range []struct {
		v   *int
		def int
	}{
		{&o.MaxQueue, DefaultMaxQueue}, {&o.MaxQueuePerSender, DefaultMaxQueuePerSender}, {&o.MaxSenderMessages, DefaultMaxSenderMessages},
		{&o.SenderBurst, DefaultSenderBurst}, {&o.MaxSpawns, DefaultMaxSpawns}, {&o.MaxMembers, DefaultMaxMembers},
		{&o.MaxHeldCalls, DefaultMaxHeldCalls}, {&o.MaxDashboardStreams, DefaultMaxDashboardStreams},
	} {
		if *limit.v == 0 {
			*limit.v = limit.def
		}
	}
	if o.MaxSenderBytes == 0 {
		o.MaxSenderBytes = DefaultMaxSenderBytes
	}
	if o.SenderRate == 0 {
		o.SenderRate = DefaultSenderRate
	}
	return o
}
