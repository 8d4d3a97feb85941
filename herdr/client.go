package herdr

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// Default client settings.
const (
	// DefaultTimeout bounds a one-shot call whose context has no deadline.
	DefaultTimeout = 30 * time.Second
	// DefaultReconnectMin is the first delay before a Stream reconnects.
	DefaultReconnectMin = 100 * time.Millisecond
	// DefaultReconnectMax caps the delay between Stream reconnects.
	DefaultReconnectMax = 5 * time.Second
)

// expired is a deadline in the past: setting it unblocks pending I/O without
// writing to the connection, which herdr would read as a disconnect.
var expired = time.Unix(1, 0)

// Client calls one herdr server. It holds no connection between calls and is
// safe for concurrent use; set its fields before the first call.
type Client struct {
	// Timeout bounds one-shot calls whose context has no deadline; zero
	// leaves them unbounded. Held-open calls (agent.wait, agent.prompt with
	// wait, subscriptions) are bounded by their context only.
	Timeout time.Duration
	// ReconnectMin is the first delay before a Stream reconnects, doubling
	// up to ReconnectMax; zero means the default.
	ReconnectMin time.Duration
	// ReconnectMax caps the delay between Stream reconnects; zero means the
	// default.
	ReconnectMax time.Duration
	// OnError, when set, is told of every call that failed, with herdr's
	// method name and the error the call returns: fleetd counts the ones
	// that say the server could not be reached or answered with a fault of
	// its own.
	OnError func(method string, err error)

	// address is what the client dials: a socket path, or host:port.
	address string
	// tls, when set, makes the connection TLS to a pane host on TCP.
	tls *tls.Config
	// mux carries a pane host's exchanges as streams of one connection.
	mux    *mux
	lastID atomic.Uint64
}

// NewClient returns a client for the herdr server listening on socketPath.
func NewClient(socketPath string) *Client {
	return &Client{
		Timeout:      DefaultTimeout,
		ReconnectMin: DefaultReconnectMin,
		ReconnectMax: DefaultReconnectMax,
		address:      socketPath,
	}
}

// NewTLSClient returns a client for a herdr-compatible pane host that serves
// the same protocol over TLS on addr (host:port). Its calls share one
// connection, each an HTTP/2 stream of its own (TLSServer); a pane host that
// does not multiplex gets one TLS connection per call, as herdr's socket
// gets one connection per call. cfg says whom to trust and which client
// certificate to present.
func NewTLSClient(addr string, cfg *tls.Config) *Client {
	c := NewClient(addr)
	c.tls = cfg
	c.mux = newMux(addr, cfg)
	return c
}

// CloseIdleConnections closes the client's connections that carry no call,
// for a pane host that is gone.
func (c *Client) CloseIdleConnections() {
	if c.mux != nil {
		c.mux.h2.CloseIdleConnections()
	}
}

// SocketPath returns what the client dials: herdr's socket, or a pane
// host's host:port.
func (c *Client) SocketPath() string {
	return c.address
}

// Ping checks that herdr answers and speaks at least MinProtocol.
func (c *Client) Ping(ctx context.Context) (*Pong, error) {
	var pong Pong
	if err := c.call(ctx, MethodPing, EmptyParams{}, ResultPong, &pong); err != nil {
		return nil, err
	}
	if pong.Protocol < MinProtocol {
		return nil, fmt.Errorf("herdr %s: %w: herdr %s speaks protocol %d, fleetd needs %d or newer",
			MethodPing, ErrUnsupportedProtocol, pong.Version, pong.Protocol, MinProtocol)
	}
	return &pong, nil
}

// WorkspaceCreate creates a workspace with one tab running a fresh shell.
func (c *Client) WorkspaceCreate(ctx context.Context, p WorkspaceCreateParams) (*WorkspaceCreated, error) {
	var created WorkspaceCreated
	if err := c.call(ctx, MethodWorkspaceCreate, p, ResultWorkspaceCreated, &created); err != nil {
		return nil, err
	}
	return &created, nil
}

// WorkspaceClose closes a workspace and ends every process in it.
func (c *Client) WorkspaceClose(ctx context.Context, workspaceID string) error {
	return c.call(ctx, MethodWorkspaceClose, WorkspaceTarget{WorkspaceID: workspaceID}, ResultOK, nil)
}

// WorkspaceRename sets a workspace's label.
func (c *Client) WorkspaceRename(ctx context.Context, workspaceID, label string) error {
	return c.call(ctx, MethodWorkspaceRename, WorkspaceRenameParams{WorkspaceID: workspaceID, Label: label}, ResultWorkspaceInfo, nil)
}

// AgentRename gives the agent target (a name or pane id) the name name.
func (c *Client) AgentRename(ctx context.Context, target, name string) error {
	return c.call(ctx, MethodAgentRename, AgentRenameParams{Target: target, Name: &name}, ResultAgentInfo, nil)
}

// TabCreate adds a tab running a fresh shell to a workspace.
func (c *Client) TabCreate(ctx context.Context, p TabCreateParams) (*TabCreated, error) {
	var created TabCreated
	if err := c.call(ctx, MethodTabCreate, p, ResultTabCreated, &created); err != nil {
		return nil, err
	}
	return &created, nil
}

// AgentStart types an agent's command into an idle shell pane. It returns as
// soon as the command is typed; poll AgentGet until InteractiveReady.
func (c *Client) AgentStart(ctx context.Context, p AgentStartParams) (*AgentStarted, error) {
	var started AgentStarted
	if err := c.call(ctx, MethodAgentStart, p, ResultAgentStarted, &started); err != nil {
		return nil, err
	}
	return &started, nil
}

// AgentGet returns the agent a target (name or pane id) names.
func (c *Client) AgentGet(ctx context.Context, target string) (*AgentInfo, error) {
	var res agentInfoResult
	if err := c.call(ctx, MethodAgentGet, AgentTarget{Target: target}, ResultAgentInfo, &res); err != nil {
		return nil, err
	}
	return &res.Agent, nil
}

// AgentList returns every pane that hosts an agent.
func (c *Client) AgentList(ctx context.Context) ([]AgentInfo, error) {
	var res agentListResult
	if err := c.call(ctx, MethodAgentList, EmptyParams{}, ResultAgentList, &res); err != nil {
		return nil, err
	}
	return res.Agents, nil
}

// AgentPrompt types a prompt into an agent and presses Enter. herdr refuses
// with ErrAgentBlocked while a dialog is on screen, since the text would
// answer it. With p.Wait set the call holds until the agent reacted, bounded
// by ctx.
//
// The text is typed as PlainText: no terminal control in it reaches the pane.
func (c *Client) AgentPrompt(ctx context.Context, p AgentPromptParams) (*AgentInfo, error) {
	p.Text = PlainText(p.Text)
	var res agentInfoResult
	call := c.call
	if p.Wait != nil {
		call = c.callHeld
	}
	if err := call(ctx, MethodAgentPrompt, p, ResultAgentPrompted, &res); err != nil {
		return nil, err
	}
	return &res.Agent, nil
}

// AgentRead reads the pane of the agent p.Target names.
func (c *Client) AgentRead(ctx context.Context, p ReadParams) (*PaneRead, error) {
	p.PaneID = ""
	var res paneReadResult
	if err := c.call(ctx, MethodAgentRead, p, ResultPaneRead, &res); err != nil {
		return nil, err
	}
	return &res.Read, nil
}

// PaneRead reads pane p.PaneID.
func (c *Client) PaneRead(ctx context.Context, p ReadParams) (*PaneRead, error) {
	p.Target = ""
	var res paneReadResult
	if err := c.call(ctx, MethodPaneRead, p, ResultPaneRead, &res); err != nil {
		return nil, err
	}
	return &res.Read, nil
}

// AgentWait holds until the agent reaches one of p.Until (idle, done or
// blocked if empty). It is bounded by ctx and p.TimeoutMS, not Client.Timeout.
func (c *Client) AgentWait(ctx context.Context, p AgentWaitParams) (*AgentInfo, error) {
	var res agentInfoResult
	if err := c.callHeld(ctx, MethodAgentWait, p, ResultAgentInfo, &res); err != nil {
		return nil, err
	}
	return &res.Agent, nil
}

// PaneSendInput types text, then presses keys, in a pane. The text is
// typed as PlainText: control keys are pressed only as keys.
func (c *Client) PaneSendInput(ctx context.Context, p PaneSendInputParams) error {
	p.Text = PlainText(p.Text)
	return c.call(ctx, MethodPaneSendInput, p, ResultOK, nil)
}

// PaneSendKeys presses keys in a pane, e.g. "enter", "ctrl+c", "up".
func (c *Client) PaneSendKeys(ctx context.Context, paneID string, keys ...string) error {
	if keys == nil {
		keys = []string{}
	}
	return c.call(ctx, MethodPaneSendKeys, PaneSendKeysParams{PaneID: paneID, Keys: keys}, ResultOK, nil)
}

// PaneReportAgent reports an agent's state for its pane. herdr answers ok
// whether or not the report takes effect: a stale seq, a label that is not
// the running agent's, or a pane whose conversation another integration
// owns all drop it silently.
func (c *Client) PaneReportAgent(ctx context.Context, p PaneReportAgentParams) error {
	return c.call(ctx, MethodPaneReportAgent, p, ResultOK, nil)
}

// PaneReleaseAgent gives up the authority p.Source holds over a pane's
// status, as an agent's session ends. herdr answers ok even when it ignores
// the release (another source owns the pane, or the seq is stale).
func (c *Client) PaneReleaseAgent(ctx context.Context, p PaneReleaseAgentParams) error {
	return c.call(ctx, MethodPaneReleaseAgent, p, ResultOK, nil)
}

// PaneClearAgentAuthority drops the report that decides a pane's status, so
// herdr's own detection decides again.
func (c *Client) PaneClearAgentAuthority(ctx context.Context, p PaneClearAgentAuthorityParams) error {
	return c.call(ctx, MethodPaneClearAgentAuthority, p, ResultOK, nil)
}

// PaneClose closes a pane and ends its whole process group.
func (c *Client) PaneClose(ctx context.Context, paneID string) error {
	return c.call(ctx, MethodPaneClose, PaneTarget{PaneID: paneID}, ResultOK, nil)
}

// SessionSnapshot returns every workspace, tab, pane and agent at one instant.
func (c *Client) SessionSnapshot(ctx context.Context) (*SessionSnapshot, error) {
	var res sessionSnapshotResult
	if err := c.call(ctx, MethodSessionSnapshot, EmptyParams{}, ResultSessionSnapshot, &res); err != nil {
		return nil, err
	}
	return &res.Snapshot, nil
}

// Call makes a one-shot call of a method beyond the ones this client names,
// such as one a herdr-compatible server adds: params is encoded as the
// request's params, and a result of type wantType is decoded into out (nil
// discards it). It is bounded like every one-shot call.
func (c *Client) Call(ctx context.Context, method string, params any, wantType string, out any) error {
	return c.call(ctx, method, params, wantType, out)
}

// call makes a one-shot call, bounded by Timeout when ctx has no deadline.
func (c *Client) call(ctx context.Context, method string, params any, wantType string, out any) error {
	if _, ok := ctx.Deadline(); !ok && c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	return c.callHeld(ctx, method, params, wantType, out)
}

// callHeld makes a call bounded by ctx alone.
func (c *Client) callHeld(ctx context.Context, method string, params any, wantType string, out any) error {
	if err := c.roundTrip(ctx, method, params, wantType, out); err != nil {
		err = fmt.Errorf("herdr %s: %w", method, err)
		if c.OnError != nil {
			c.OnError(method, err)
		}
		return err
	}
	return nil
}

func (c *Client) roundTrip(ctx context.Context, method string, params any, wantType string, out any) error {
	id := c.newID()
	req, err := encodeRequest(id, method, params)
	if err != nil {
		return err
	}
	ex, err := c.open(ctx, req)
	if err != nil {
		return err
	}
	defer ex.Close()
	stop := context.AfterFunc(ctx, ex.Abort)
	defer stop()

	line, err := readLine(bufio.NewReader(ex), maxResponseLine)
	if err != nil {
		return ioError(ctx, "reading response", err)
	}
	resp, err := decodeResponse(line)
	if err != nil {
		return err
	}
	// herdr answers a request it could not parse with an empty id.
	if resp.ID != id && !(resp.Error != nil && resp.ID == "") {
		return fmt.Errorf("%w: response id %q, want %q", ErrProtocol, resp.ID, id)
	}
	if resp.Error != nil {
		return resp.Error
	}
	return decodeResult(resp.Result, wantType, out)
}

// open sends one request and returns its exchange: a stream of the pane
// host's shared connection, or a connection of its own.
func (c *Client) open(ctx context.Context, req []byte) (exchange, error) {
	if c.mux != nil && !c.mux.single.Load() {
		ex, err := c.mux.open(ctx, req)
		if !errors.Is(err, errNoMux) {
			return ex, err
		}
	}
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(expired) })
	defer stop()
	if _, err := conn.Write(req); err != nil {
		_ = conn.Close()
		return nil, ioError(ctx, "writing request", err)
	}
	return connExchange{conn}, nil
}

func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	var conn net.Conn
	var err error
	if c.tls != nil {
		d := tls.Dialer{Config: c.tls}
		conn, err = d.DialContext(ctx, "tcp", c.address)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "unix", c.address)
		if err == nil {
			if perr := checkServerPeer(conn); perr != nil {
				_ = conn.Close()
				return nil, perr
			}
		}
	}
	if err != nil {
		if ctxErr := context.Cause(ctx); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, fmt.Errorf("%w: dialing %s: %w", ErrUnavailable, c.address, err)
	}
	return conn, nil
}

func (c *Client) newID() string {
	return strconv.FormatUint(c.lastID.Add(1), 10)
}

// ioError reports a broken connection, or the context's error when the
// context is what broke it.
func ioError(ctx context.Context, doing string, err error) error {
	if ctxErr := context.Cause(ctx); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, errLineTooLong) {
		return fmt.Errorf("%w: %s: %w", ErrProtocol, doing, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, doing, err)
}
