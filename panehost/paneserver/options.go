package paneserver

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/fleetd/fleetd/herdr"
)

// Options configure a Server. Only SocketPath is required.
type Options struct {
	// SocketPath is where the server listens. Its directory is created.
	SocketPath string
	// Shell is the program each pane runs; $SHELL, else /bin/sh, if empty.
	Shell string
	// Cwd is where panes start when workspace.create names no cwd; the
	// server's working directory if empty.
	Cwd string
	// BinPath is given to panes as HERDR_BIN_PATH; this executable if empty.
	BinPath string
	// AgentCommands overrides the executable agent.start types for an agent
	// label, e.g. {"claude": "/opt/fake-claude"}.
	AgentCommands map[string]string
	// AgentSettle is how long a started agent must be the foreground program
	// before it counts as interactive; herdr's 3s if zero.
	AgentSettle time.Duration
	// PromptSubmitDelay separates a prompt's text from its Enter; herdr's
	// 300ms if zero.
	PromptSubmitDelay time.Duration
	// EventInterval paces events.subscribe: each subscription gets at most
	// one event per interval; herdr's 100ms if zero.
	EventInterval time.Duration
	// Columns and Rows size every pane; herdr's headless 120x40 if zero.
	Columns, Rows int
	// ScrollbackLines bounds each pane's scrollback; 10000 if zero.
	ScrollbackLines int
	// SessionFile is where the session is saved, as herdr saves
	// session.json: after a restart the layout comes back with the same
	// ids, and agents an official integration reported are resumed. Empty
	// keeps nothing across restarts.
	SessionFile string
	// SaveDelay is how long after a change the session is saved; herdr's
	// 5s if zero. Close saves at once.
	SaveDelay time.Duration
	// Version is reported by ping; "0.8.2" if empty.
	Version string
	// Protocol is reported by ping; 20 if zero.
	Protocol int
	// Logger receives connection failures; discarded if nil.
	Logger *slog.Logger
	// Users, when set, runs each workspace's processes under a Unix user of
	// its own and authorises socket calls by the caller's peer
	// credentials (see CanSwitchUsers). The socket is then open to all
	// users (mode 0666): what a caller may do is decided per call.
	Users *UserOptions
	// Extensions are methods beyond herdr's protocol that the server also
	// answers: fleetd's pane host adds its own. Each decodes its params.
	Extensions map[string]Extension
	// TLSAddress, with TLSConfig, serves the protocol over TLS on TCP as
	// well, one request per connection as on the socket: how a controller
	// outside the server's pod reaches it. TLSConfig decides whom it lets
	// in; every caller it admits may do everything.
	TLSAddress string
	TLSConfig  *tls.Config
	// SocketGroup opens the socket to its group as well (mode 0660): a
	// member Pod's pane host, which runs as a user of its own beside the
	// agent's container, relays fleetd's calls through it. Without
	// workspace users the socket's mode is the only gate, as herdr's is:
	// every caller it lets in may do everything.
	SocketGroup bool
	// MaxConnsPerUser bounds the connections one workspace user (any
	// caller but the server's own identity) keeps open at once; one more
	// is answered server_unavailable and closed. DefaultMaxConnsPerUser if
	// zero; negative: no bound.
	MaxConnsPerUser int
	// MaxOutputWatchesPerUser bounds the pane.output_matched
	// subscriptions one workspace user holds across its streams, each a
	// read of its pane every event interval; a subscribe past it is
	// answered server_unavailable. DefaultMaxOutputWatchesPerUser if zero;
	// negative: no bound.
	MaxOutputWatchesPerUser int
	// OutputRate bounds the bytes of a pane's output the server takes into
	// its terminal each second, OutputBurst more at once. A program that
	// writes faster is held back by its terminal, as on a slow one: its
	// writes block until the server reads on. It is never killed and
	// nothing it writes is dropped. DefaultOutputRate and
	// DefaultOutputBurst if zero; a negative rate: no bound.
	OutputRate, OutputBurst int
}

// Defaults of the per-user and per-pane bounds in Options.
const (
	DefaultMaxConnsPerUser         = 64
	DefaultMaxOutputWatchesPerUser = 16
	DefaultOutputRate              = 2 << 20
	DefaultOutputBurst             = 1 << 20
)

// Extension serves a method beyond herdr's protocol.
type Extension func(ctx context.Context, params json.RawMessage) (any, *herdr.Error)

func (o Options) withDefaults() (Options, error) {
	if o.SocketPath == "" {
		return o, errors.New("paneserver: socket path is required")
	}
	if o.Shell == "" {
		o.Shell = os.Getenv("SHELL")
	}
	if o.Shell == "" {
		o.Shell = "/bin/sh"
	}
	if o.Cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return o, fmt.Errorf("paneserver: resolving default cwd: %w", err)
		}
		o.Cwd = wd
	}
	if o.BinPath == "" {
		if exe, err := os.Executable(); err == nil {
			o.BinPath = exe
		}
	}
	o.AgentSettle = orDefault(o.AgentSettle, agentStartSettle)
	o.PromptSubmitDelay = orDefault(o.PromptSubmitDelay, 300*time.Millisecond)
	o.EventInterval = orDefault(o.EventInterval, samplePeriod)
	o.SaveDelay = orDefault(o.SaveDelay, defaultSaveDelay)
	o.Columns = orDefault(o.Columns, 120)
	o.Rows = orDefault(o.Rows, 40)
	o.ScrollbackLines = orDefault(o.ScrollbackLines, 10000)
	o.Version = orDefault(o.Version, "0.8.2")
	o.Protocol = orDefault(o.Protocol, herdr.MinProtocol)
	o.MaxConnsPerUser = orDefault(o.MaxConnsPerUser, DefaultMaxConnsPerUser)
	o.MaxOutputWatchesPerUser = orDefault(o.MaxOutputWatchesPerUser, DefaultMaxOutputWatchesPerUser)
	o.OutputRate = orDefault(o.OutputRate, DefaultOutputRate)
	o.OutputBurst = orDefault(o.OutputBurst, DefaultOutputBurst)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (o *Options) agentExecutable(label string) string {
	if exe, ok := o.AgentCommands[label]; ok {
		return exe
	}
	if exe, ok := agentExecutables[label]; ok {
		return exe
	}
	return label
}
