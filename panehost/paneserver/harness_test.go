package paneserver_test

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// schemaFile is herdr's published API schema, as herdr ships it.
const schemaFile = "testdata/herdr-api.schema.json"

// waitFor bounds every poll and wait. It is generous: the tests share a small,
// busy machine, and a poll that succeeds returns at once.
const waitFor = 60 * time.Second

var schemas *schemaSet

func TestMain(m *testing.M) {
	if os.Getenv(asClientEnv) != "" {
		os.Exit(runAsClient())
	}
	flag.Parse()
	var err error
	if schemas, err = loadSchemas(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && !testing.Short() {
		if missing := schemas.unvalidated(); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: no test made the server emit, and validated: %s\n", strings.Join(missing, ", "))
			code = 1
		}
	}
	os.Exit(code)
}

// schemaSet validates lines against herdr's schema and remembers which
// result types, event kinds and error codes it has seen validated.
type schemaSet struct {
	request, success, failure, event, subscriptionEvent *jsonschema.Schema

	mu   sync.Mutex
	seen map[string]bool
}

func loadSchemas() (*schemaSet, error) {
	c := jsonschema.NewCompiler()
	compile := func(name string) (*jsonschema.Schema, error) {
		s, err := c.Compile(schemaFile + "#/schemas/" + name)
		if err != nil {
			return nil, fmt.Errorf("compiling schema %s: %w", name, err)
		}
		return s, nil
	}
	var s schemaSet
	var err error
	for name, dst := range map[string]**jsonschema.Schema{
		"request":            &s.request,
		"success_response":   &s.success,
		"error_response":     &s.failure,
		"event":              &s.event,
		"subscription_event": &s.subscriptionEvent,
	} {
		if *dst, err = compile(name); err != nil {
			return nil, err
		}
	}
	s.seen = map[string]bool{}
	return &s, nil
}

// mustEmit lists what the server's tests must make it send; each is checked
// against the schema when it passes the relay.
var mustEmit = []string{
	"result:pong", "result:workspace_created", "result:tab_created", "result:ok",
	"result:agent_started", "result:agent_info", "result:agent_list", "result:agent_prompted",
	"result:pane_read", "result:session_snapshot", "result:subscription_started",
	"event:workspace_created", "event:workspace_closed", "event:tab_created", "event:tab_closed",
	"event:pane_created", "event:pane_closed", "event:pane_exited", "event:pane_updated",
	"event:pane_agent_detected", "event:pane.agent_status_changed", "event:pane.output_matched",
	"error:invalid_request", "error:pane_not_found", "error:agent_blocked", "error:agent_pane_busy",
	"error:invalid_agent_name", "error:invalid_agent_timeout", "error:agent_not_found",
}

func (s *schemaSet) unvalidated() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var missing []string
	for _, want := range mustEmit {
		if !s.seen[want] {
			missing = append(missing, want)
		}
	}
	return missing
}

// validateRequest checks a line a client sent.
func (s *schemaSet) validateRequest(line []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(line))
	if err != nil {
		return fmt.Errorf("request is not JSON: %w", err)
	}
	return s.request.Validate(v)
}

// validateServerLine checks a line the server sent against the schema its
// shape calls for.
func (s *schemaSet) validateServerLine(line []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(line))
	if err != nil {
		return fmt.Errorf("line is not JSON: %w", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return errors.New("line is not a JSON object")
	}
	var schema *jsonschema.Schema
	var seen string
	switch {
	case obj["error"] != nil:
		schema = s.failure
		code, _ := obj["error"].(map[string]any)["code"].(string)
		seen = "error:" + code
	case obj["result"] != nil:
		schema = s.success
		typ, _ := obj["result"].(map[string]any)["type"].(string)
		seen = "result:" + typ
	default:
		kind, _ := obj["event"].(string)
		schema = s.event
		if strings.Contains(kind, ".") {
			schema = s.subscriptionEvent
		}
		seen = "event:" + kind
	}
	if err := schema.Validate(v); err != nil {
		return err
	}
	s.mu.Lock()
	s.seen[seen] = true
	s.mu.Unlock()
	return nil
}

// relay sits between the client and the server on a socket of its own. It
// validates every line either way against herdr's schema, and can cut every
// connection at once, as a herdr restart or a network blip would.
type relay struct {
	path   string
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	clients   map[net.Conn]struct{}
	failures  []string
	validated int
}

func newRelay(t testing.TB, path, target string) *relay {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	r := &relay{path: path, target: target, ln: ln, conns: map[net.Conn]struct{}{}, clients: map[net.Conn]struct{}{}}
	r.wg.Go(r.accept)
	return r
}

func (r *relay) accept() {
	for {
		client, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Go(func() { r.pipe(client) })
	}
}

func (r *relay) pipe(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("unix", r.target)
	if err != nil {
		// The server is down: the client sees its connection close.
		return
	}
	defer server.Close()
	r.track(client, server)
	defer r.untrack(client, server)
	r.mu.Lock()
	r.clients[client] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.clients, client)
		r.mu.Unlock()
	}()

	go func() {
		// Requests: the first line is validated; whatever follows is passed
		// on, so the server sees what the client really sent.
		defer server.Close()
		br := bufio.NewReader(client)
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			r.check("request", line, err, (*schemaSet).validateRequest)
			if _, werr := server.Write(line); werr != nil {
				return
			}
		}
		if err == nil {
			_, _ = io.Copy(server, br)
		}
	}()
	br := bufio.NewReader(server)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			r.check("server line", line, err, (*schemaSet).validateServerLine)
			if _, werr := client.Write(line); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *relay) check(what string, line []byte, readErr error, validate func(*schemaSet, []byte) error) {
	if readErr != nil {
		// A line cut short by a cut connection is not the server's fault.
		return
	}
	err := validate(schemas, line)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.validated++
	if err != nil {
		r.failures = append(r.failures, fmt.Sprintf("%s %s does not match herdr's schema: %s", what, bytes.TrimSpace(line), brief(err)))
	}
}

func (r *relay) track(conns ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range conns {
		r.conns[c] = struct{}{}
	}
}

func (r *relay) untrack(conns ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range conns {
		delete(r.conns, c)
	}
}

// cut closes every connection passing through the relay.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		_ = c.Close()
	}
}

// clientCount counts the connections passing through the relay.
func (r *relay) clientCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.clients)
}

// inject sends line to every client as if the server had sent it.
func (r *relay) inject(line string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.clients {
		_, _ = io.WriteString(c, line)
	}
	return len(r.clients)
}

func (r *relay) close(t testing.TB) {
	t.Helper()
	_ = r.ln.Close()
	r.cut()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.failures {
		t.Error(f)
	}
	if _, isTest := t.(*testing.T); isTest && r.validated == 0 {
		t.Error("relay validated no line: the test bypassed it")
	}
}

// brief shortens a schema error: it lists every branch of a oneOf.
func brief(err error) string {
	const limit = 1500
	msg := err.Error()
	if len(msg) > limit {
		msg = msg[:limit] + "..."
	}
	return msg
}

// harness is a server under test with a client talking to it through a
// validating relay.
type harness struct {
	t      testing.TB
	dir    string
	opts   paneserver.Options
	srv    *paneserver.Server
	served chan error
	relay  *relay
	// client goes through the relay; every line it exchanges is validated.
	client *herdr.Client
	// direct talks to the server's socket itself, for traffic that a cut
	// relay must not disturb.
	direct *herdr.Client
}

// newHarness starts a server whose panes run /bin/sh and whose "claude"
// agent is cat under the name claude, so agent.start needs no real agent
// and the server identifies the process as claude, as herdr does by name.
func newHarness(t testing.TB, configure ...func(*paneserver.Options)) *harness {
	t.Helper()
	dir := shortTempDir(t)
	claude := filepath.Join(dir, "claude")
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(cat, claude); err != nil {
		t.Fatal(err)
	}
	h := &harness{
		t:   t,
		dir: dir,
		opts: paneserver.Options{
			SocketPath:    filepath.Join(dir, "herdr.sock"),
			Shell:         "/bin/sh",
			Cwd:           dir,
			AgentCommands: map[string]string{"claude": claude},
			AgentSettle:   200 * time.Millisecond,
		},
	}
	for _, c := range configure {
		c(&h.opts)
	}
	h.start()
	h.relay = newRelay(t, filepath.Join(dir, "relay.sock"), h.opts.SocketPath)
	h.client = herdr.NewClient(h.relay.path)
	h.direct = herdr.NewClient(h.opts.SocketPath)
	t.Cleanup(func() {
		h.relay.close(t)
		h.stop()
	})
	return h
}

func (h *harness) start() {
	h.t.Helper()
	srv, err := paneserver.New(h.opts)
	if err != nil {
		h.t.Fatalf("paneserver.New() = %v", err)
	}
	h.srv = srv
	h.served = make(chan error, 1)
	go func() { h.served <- srv.Serve() }()
}

func (h *harness) stop() {
	h.t.Helper()
	if err := h.srv.Close(); err != nil {
		h.t.Errorf("Close() = %v", err)
	}
	if err := <-h.served; err != nil {
		h.t.Errorf("Serve() = %v", err)
	}
}

// restart replaces the server with a fresh one on the same socket, as a
// restarted herdr would: panes are gone.
func (h *harness) restart() {
	h.t.Helper()
	h.stop()
	h.start()
}

// shortTempDir returns a directory whose socket paths fit the ~104 byte
// limit of unix socket addresses, which t.TempDir often exceeds.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// workspace creates a workspace and waits for its shell's prompt.
func (h *harness) workspace(p herdr.WorkspaceCreateParams) *herdr.WorkspaceCreated {
	h.t.Helper()
	created, err := h.client.WorkspaceCreate(h.t.Context(), p)
	if err != nil {
		h.t.Fatalf("WorkspaceCreate() = %v", err)
	}
	if err := h.awaitPrompt(created.RootPane.PaneID); err != nil {
		h.t.Fatal(err)
	}
	return created
}

// awaitPrompt waits until the pane's shell has drawn its prompt. Input typed
// earlier is echoed before the prompt, which then shares a line with the
// command's output.
func (h *harness) awaitPrompt(paneID string) error {
	return testutil.Poll("pane "+paneID+" shows a prompt", func() error {
		read, err := h.client.PaneRead(h.t.Context(), herdr.ReadParams{PaneID: paneID, Source: herdr.ReadSourceVisible})
		if err != nil {
			return err
		}
		if strings.TrimSpace(read.Text) == "" {
			return errors.New("the screen is empty")
		}
		return nil
	}, testutil.Within(waitFor))
}

// pane creates a workspace and returns its pane's id.
func (h *harness) pane() string {
	h.t.Helper()
	return h.workspace(herdr.WorkspaceCreateParams{}).RootPane.PaneID
}

// run types a command line into a pane and presses Enter.
func (h *harness) run(paneID, command string) {
	h.t.Helper()
	if err := h.tryRun(paneID, command); err != nil {
		h.t.Fatal(err)
	}
}

// tryRun is run for goroutines other than the test's.
func (h *harness) tryRun(paneID, command string) error {
	err := h.client.PaneSendInput(h.t.Context(), herdr.PaneSendInputParams{PaneID: paneID, Text: command, Keys: []string{"enter"}})
	if err != nil {
		return fmt.Errorf("PaneSendInput(%s, %q) = %w", paneID, command, err)
	}
	return nil
}

// waitLine polls the pane's logical lines until one equals line, and returns
// the text read. Matching a whole line keeps the typed command, which holds
// the same words, from counting.
func (h *harness) waitLine(paneID, line string) string {
	h.t.Helper()
	text, err := h.awaitLine(paneID, line)
	if err != nil {
		h.t.Fatal(err)
	}
	return text
}

// awaitLine is waitLine for goroutines other than the test's.
func (h *harness) awaitLine(paneID, line string) (string, error) {
	var text string
	err := testutil.Poll(fmt.Sprintf("pane %s shows line %q", paneID, line), func() error {
		read, err := h.client.PaneRead(h.t.Context(), herdr.ReadParams{PaneID: paneID, Source: herdr.ReadSourceRecentUnwrapped, Lines: ptr(1000)})
		if err != nil {
			return err
		}
		text = read.Text
		if !slices.Contains(strings.Split(text, "\n"), line) {
			return fmt.Errorf("pane shows:\n%s", text)
		}
		return nil
	}, testutil.Within(waitFor))
	return text, err
}

// rawCall sends one line straight to the server and returns the lines it
// answers with, each validated against the schema.
func (h *harness) rawCall(line string) []string {
	h.t.Helper()
	conn, err := net.Dial("unix", h.opts.SocketPath)
	if err != nil {
		h.t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(waitFor))
	// The server may stop reading early, as it does past 1 MiB; its answer
	// is still there to read. The half-close ends a line with no newline.
	_, _ = io.WriteString(conn, line)
	_ = conn.(*net.UnixConn).CloseWrite()
	var lines []string
	br := bufio.NewReader(conn)
	for {
		got, err := br.ReadBytes('\n')
		if len(got) > 0 {
			if verr := schemas.validateServerLine(got); verr != nil {
				h.t.Errorf("server line %s does not match herdr's schema: %s", got, brief(verr))
			}
			lines = append(lines, strings.TrimSpace(string(got)))
		}
		if err != nil {
			return lines
		}
	}
}

func ptr[T any](v T) *T { return &v }

// nextEvent returns the stream's next event, failing at waitFor.
func nextEvent(t testing.TB, s *herdr.Stream) herdr.Event {
	t.Helper()
	select {
	case ev, ok := <-s.Events():
		if !ok {
			t.Fatalf("stream ended: %v", s.Err())
		}
		return ev
	case <-time.After(waitFor):
		t.Fatalf("no event within %s", waitFor)
	}
	return herdr.Event{}
}

// awaitEvent skips events until one satisfies match.
func awaitEvent(t testing.TB, s *herdr.Stream, what string, match func(herdr.Event) bool) herdr.Event {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				t.Fatalf("stream ended before %s: %v", what, s.Err())
			}
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s within %s", what, waitFor)
		}
	}
}
