package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/heldcall"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/process"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/tracing"
)

// principalContextKey carries the resolved Principal in a request context.
type principalContextKey struct{}

// setUpMCP makes the gateway's MCP server, with every tool registered.
func (g *Gateway) setUpMCP() {
	g.server = mcp.NewServer(&mcp.Implementation{Name: "fleetd", Title: "fleetd gateway", Version: fleetv1alpha1.GroupVersion.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		// Tools only; no logging capability, and the tool list never changes.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	g.registerTools()
	g.server.AddReceivingMiddleware(g.toolMiddleware)
}

// mcpHandler serves the streamable HTTP MCP endpoint to callers that
// authenticate resolved.
func (g *Gateway) mcpHandler() http.Handler {
	streamable := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.server }, &mcp.StreamableHTTPOptions{
		// No MCP session state: a restart or another replica loses nothing.
		Stateless:                    true,
		PropagateRequestCancellation: true,
		// Room for a message and its images, base64 in the call.
		MaxRequestBodyBytes: 4*fleetv1alpha1.MaxContentBytes + 2*fleetv1alpha1.MaxImageBytes,
	})
	// The SDK takes the caller from TokenInfo on each request; the
	// principal was already resolved by authenticate.
	return auth.RequireBearerToken(func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		p, ok := r.Context().Value(principalContextKey{}).(*identity.Principal)
		if !ok {
			if unclaimed, _ := r.Context().Value(unclaimedContextKey{}).(bool); unclaimed {
				// Discovery only (onlyDiscovery): no principal, no tool.
				return &auth.TokenInfo{UserID: "unclaimed-warm-pod"}, nil
			}
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: p.Namespace + "/" + p.Key(), Extra: map[string]any{tokenInfoPrincipal: p}}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(g.parkingHandler(streamable))
}

// ToolNamespace is a group of tools that is switched on or off as a whole.
type ToolNamespace string

// Tool namespaces.
const (
	// ToolNamespaceBridge holds the bridge_* tools; it is always on.
	ToolNamespaceBridge ToolNamespace = "bridge"
	// ToolNamespaceTeam holds the team_* tools; on unless switched off.
	ToolNamespaceTeam ToolNamespace = "team"
	// ToolNamespaceProcess holds the process_* tools, which run commands on
	// the gateway's host; off unless switched on.
	ToolNamespaceProcess ToolNamespace = "process"
)

// namespaceDefaults says which namespaces are on when Options.Features does
// not mention them.
var namespaceDefaults = map[ToolNamespace]bool{
	ToolNamespaceBridge:  true,
	ToolNamespaceTeam:    true,
	ToolNamespaceProcess: false,
}

// call is one tool call and the caller it came from.
type call struct {
	tool string
	req  *mcp.CallToolRequest
	who  *identity.Principal

	// finish, when set, lets the call be parked (park.go): it makes the
	// tool's result of what its handler returns.
	finish func(out any, err error) *mcp.CallToolResult
	// stream answers a parked call, and token is its progress token; a
	// parked call has no request of its own.
	stream *heldcall.Call
	token  any
}

// newCall is a call of tool by who that is held, when it waits, on its
// own request: the dashboard's and REST's calls.
func newCall(tool string, who *identity.Principal) *call {
	return &call{tool: tool, who: who}
}

// progressToken is the call's progress token, nil when its client gave
// none.
func (c *call) progressToken() any {
	if c.req != nil {
		return progressToken(c.req)
	}
	return c.token
}

// result is what every tool output implements: room for a structured error,
// and the outcome label of the call metric.
type result interface {
	setError(*toolerr.Error)
	metricOutcome() string
}

// texter is an output whose text content, what most clients put in the
// model's context, is better as lines than as the JSON of its structured
// content repeated.
type texter interface {
	text() string
}

// tokenInfoPrincipal is the key of the resolved Principal in the TokenInfo
// the HTTP layer attaches to every MCP request.
const tokenInfoPrincipal = "fleetd.principal"

// principalOf returns the caller of an MCP request, resolved by the HTTP
// layer from this request's own bearer token.
func principalOf(req *mcp.CallToolRequest) *identity.Principal {
	if req == nil || req.Extra == nil || req.Extra.TokenInfo == nil {
		return nil
	}
	p, _ := req.Extra.TokenInfo.Extra[tokenInfoPrincipal].(*identity.Principal)
	return p
}

// toolSpec describes one tool for registration.
type toolSpec struct {
	namespace   ToolNamespace
	name        string
	description string
	readOnly    bool
	// schema adjusts the input schema derived from the input type, with
	// what Go types cannot say (enums, bounds).
	schema func(*jsonschema.Schema)
}

// addTool registers a typed tool. Every call is attributed to its
// principal, counted, and shielded: an error becomes a structured error
// result and a panic becomes an internal error, never a crashed gateway.
func addTool[In, Out any, PO interface {
	*Out
	result
}](g *Gateway, spec toolSpec, h func(context.Context, *call, In) (*Out, error)) {
	g.toolNamespaces[spec.name] = spec.namespace
	g.toolOrder = append(g.toolOrder, spec.name)
	if !g.svc.opts.enabled(spec.namespace) {
		return
	}
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("input schema of %s: %v", spec.name, err))
	}
	if spec.schema != nil {
		spec.schema(in)
	}
	tool := &mcp.Tool{
		Name:        spec.name,
		Description: spec.description,
		InputSchema: in,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: spec.readOnly, OpenWorldHint: ptr.To(false)},
	}
	mcp.AddTool(g.server, tool, func(ctx context.Context, req *mcp.CallToolRequest, input In) (*mcp.CallToolResult, *Out, error) {
		ctx, span := startCallSpan(ctx, spec.name, req)
		c := &call{tool: spec.name, req: req, who: principalOf(req)}
		c.finish = func(v any, err error) *mcp.CallToolResult {
			defer endCallSpan(span, err)
			out, _ := v.(*Out)
			res, out, te := toolResult[Out, PO](g, spec.name, out, err)
			if te != nil {
				return errorResult(te)
			}
			return withStructuredContent(res, out)
		}
		out, err := runTool(g, ctx, c, input, h)
		if errors.Is(err, errParked) {
			// The gateway answers the call itself; what the SDK answers to
			// this placeholder is never sent. The span ends in finish.
			return &mcp.CallToolResult{}, nil, nil
		}
		endCallSpan(span, err)
		res, out, _ := toolResult[Out, PO](g, spec.name, out, err)
		return res, out, nil
	})
}

// startCallSpan starts the span of a tool call, named after the tool: a
// child of the trace context the caller sent in its HTTP headers, when
// it sent one and the process propagates it, else the root of a trace.
func startCallSpan(ctx context.Context, tool string, req *mcp.CallToolRequest) (context.Context, trace.Span) {
	if req != nil && req.Extra != nil && req.Extra.Header != nil {
		ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(req.Extra.Header))
	}
	return tracing.Tracer().Start(ctx, tool, trace.WithSpanKind(trace.SpanKindServer))
}

// endCallSpan ends a tool call's span, marked as an error when the call
// failed.
func endCallSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, toolerr.From(err).Error())
	}
	span.End()
}

// toolResult is the result of a handler's output, or of its error (then
// also returned as te), and counts the call.
func toolResult[Out any, PO interface {
	*Out
	result
}](g *Gateway, tool string, out *Out, err error) (_ *mcp.CallToolResult, _ *Out, te *toolerr.Error) {
	if err != nil {
		te = toolerr.From(err)
		label := string(te.Code)
		if errors.Is(err, context.Canceled) {
			label = "client_gone"
		}
		g.svc.metrics.toolCalls.WithLabelValues(tool, label).Inc()
		out = new(Out)
		PO(out).setError(te)
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: te.Error()}}}, out, te
	}
	if out == nil {
		out = new(Out)
	}
	g.svc.metrics.toolCalls.WithLabelValues(tool, PO(out).metricOutcome()).Inc()
	if tx, ok := any(out).(texter); ok {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tx.text()}}}, out, nil
	}
	return nil, out, nil
}

// withStructuredContent completes a handler's result with its output as the
// SDK does for a typed tool: the output as structured content and, when
// the result has no content, as its text, both as the SDK encodes it (its
// JSON decoded and encoded again, for validation, so the keys come sorted).
func withStructuredContent(res *mcp.CallToolResult, out any) *mcp.CallToolResult {
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	raw, err := json.Marshal(out)
	var v any
	if err == nil {
		err = json.Unmarshal(raw, &v)
	}
	if err == nil {
		raw, err = json.Marshal(v)
	}
	if err != nil {
		return errorResult(toolerr.New(toolerr.Internal, "encoding the result: %v", err))
	}
	res.StructuredContent = json.RawMessage(raw)
	if res.Content == nil {
		res.Content = []mcp.Content{&mcp.TextContent{Text: string(raw)}}
	}
	return res
}

// runTool runs a handler and turns a panic into an internal error.
func runTool[In, Out any](g *Gateway, ctx context.Context, c *call, in In, h func(context.Context, *call, In) (*Out, error)) (out *Out, err error) {
	defer func() {
		if r := recover(); r != nil {
			g.svc.panics.Add(1)
			g.log.Error(fmt.Errorf("%v", r), "Tool handler panicked", "tool", c.tool, "stack", string(debug.Stack()))
			out, err = nil, toolerr.New(toolerr.Internal, "the gateway failed while handling %s", c.tool)
		}
	}()
	if c.who == nil {
		return nil, toolerr.New(toolerr.Unauthorized, "the request carries no resolved caller")
	}
	return h(ctx, c, in)
}

// toolsByNamespace lists the tool names of a namespace in registration order.
func (g *Gateway) toolsByNamespace(ns ToolNamespace) []string {
	var names []string
	for _, n := range g.toolOrder {
		if g.toolNamespaces[n] == ns {
			names = append(names, n)
		}
	}
	return names
}

// enabled reports whether a tool namespace is on.
func (o Options) enabled(ns ToolNamespace) bool {
	if ns == ToolNamespaceBridge {
		return true
	}
	if on, ok := o.Features[ns]; ok {
		return on
	}
	return namespaceDefaults[ns]
}

// registerTools adds every tool to the MCP server.
func (g *Gateway) registerTools() {
	contentLimit := func(props ...string) func(*jsonschema.Schema) {
		return func(s *jsonschema.Schema) {
			for _, p := range props {
				if ps := s.Properties[p]; ps != nil {
					ps.MinLength = ptr.To(1)
					ps.MaxLength = ptr.To(fleetv1alpha1.MaxContentBytes)
				}
			}
		}
	}
	timeoutBounds := func(s *jsonschema.Schema) {
		if ps := s.Properties["timeoutMs"]; ps != nil {
			ps.Minimum = ptr.To(0.0)
		}
	}
	both := func(fs ...func(*jsonschema.Schema)) func(*jsonschema.Schema) {
		return func(s *jsonschema.Schema) {
			for _, f := range fs {
				f(s)
			}
		}
	}

	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_send", description: descSend, schema: both(contentLimit("content"), timeoutBounds)}, g.svc.send)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_reply", description: descReply, schema: contentLimit("content")}, g.svc.reply)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_ask", description: descAsk, schema: both(contentLimit("content"), timeoutBounds)}, g.svc.ask)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_poll", description: descPoll, readOnly: true}, g.svc.poll)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_ack", description: descAck}, g.svc.ack)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_status", description: descStatus, readOnly: true}, g.svc.status)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_spawn", description: descSpawn}, g.svc.spawn)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_list", description: descList, readOnly: true}, g.svc.list)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_stop", description: descStop}, g.svc.stop)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_profiles", description: descProfiles, readOnly: true}, g.svc.listProfiles)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_whoami", description: descWhoami, readOnly: true}, g.svc.whoami)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_read", description: descRead, readOnly: true, schema: func(s *jsonschema.Schema) {
		if ps := s.Properties["source"]; ps != nil {
			ps.Enum = []any{"visible", "recent", "recent_unwrapped", "detection"}
		}
		if ps := s.Properties["lines"]; ps != nil {
			ps.Minimum, ps.Maximum = ptr.To(1.0), ptr.To(float64(maxReadLines))
		}
	}}, g.svc.read)
	addTool(g, toolSpec{namespace: ToolNamespaceBridge, name: "bridge_cancel", description: descCancel}, g.svc.cancel)

	addTool(g, toolSpec{namespace: ToolNamespaceTeam, name: "team_status", description: descTeamStatus, readOnly: true}, g.svc.teamStatus)
	imageLimit := func(s *jsonschema.Schema) {
		for _, p := range []string{"imagePaths", "images"} {
			if ps := s.Properties[p]; ps != nil {
				ps.MaxItems = ptr.To(fleetv1alpha1.MaxImages)
			}
		}
	}
	addTool(g, toolSpec{namespace: ToolNamespaceTeam, name: "team_message", description: descTeamMessage, schema: both(contentLimit("content", "recipient"), imageLimit)}, g.svc.teamMessage)
	addTool(g, toolSpec{namespace: ToolNamespaceTeam, name: "team_manage", description: descTeamManage, schema: both(contentLimit("message"), imageLimit, func(s *jsonschema.Schema) {
		if ps := s.Properties["action"]; ps != nil {
			ps.Enum = []any{"add", "remove"}
		}
	})}, g.svc.teamManage)

	addTool(g, toolSpec{namespace: ToolNamespaceProcess, name: "process_run", description: descProcessRun, schema: func(s *jsonschema.Schema) {
		if ps := s.Properties["command"]; ps != nil {
			ps.MinItems = ptr.To(1)
			ps.MaxItems = ptr.To(process.MaxArgs)
		}
	}}, g.svc.processRun)
	addTool(g, toolSpec{namespace: ToolNamespaceProcess, name: "process_status", description: descProcessStatus, readOnly: true}, g.svc.processStatus)
	addTool(g, toolSpec{namespace: ToolNamespaceProcess, name: "process_logs", description: descProcessLogs, readOnly: true}, g.svc.processLogs)
	addTool(g, toolSpec{namespace: ToolNamespaceProcess, name: "process_kill", description: descProcessKill}, g.svc.processKill)
}

// checkContent validates a message, question, answer or reply.
func checkContent(field, s string) *toolerr.Error {
	switch {
	case s == "":
		return toolerr.New(toolerr.InvalidArgument, "%s must not be empty", field)
	case len(s) > fleetv1alpha1.MaxContentBytes:
		return toolerr.New(toolerr.InvalidArgument, "%s is %d bytes; at most %d are allowed", field, len(s), fleetv1alpha1.MaxContentBytes)
	case !utf8.ValidString(s):
		return toolerr.New(toolerr.InvalidArgument, "%s is not valid UTF-8", field)
	}
	return nil
}

// requireMember refuses a tool that only workers can use.
func requireMember(c *call) *toolerr.Error {
	if c.who.Kind != fleetv1alpha1.PrincipalMember {
		return toolerr.New(toolerr.Forbidden, "%s is for fleet members answering a message; you are %s %s", c.tool, c.who.Kind, c.who.Name)
	}
	return nil
}

// instructions tell a model what the gateway is for.
const instructions = `fleetd runs AI coding agents as fleet members, each in a terminal pane. Hand work to a member with bridge_send: one call that waits until the member replies, asks you a question, ends its turn, or times out. If you are a member working on a message, finish with bridge_reply; ask the sender with bridge_ask. Outcomes nobody waited for are in bridge_poll.`

// toolMiddleware answers calls to switched-off namespaces with
// feature_disabled, and gives the SDK's own argument errors (schema
// validation, undecodable JSON) the structured form every error has.
func (g *Gateway) toolMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ctr, ok := req.(*mcp.CallToolRequest)
		if !ok || method != "tools/call" || ctr.Params == nil {
			return next(ctx, method, req)
		}
		if principalOf(ctr) == nil {
			// Only an unclaimed warm Pod's token gets here with none, and
			// onlyDiscovery lets no tool call of it through.
			return errorResult(toolerr.New(toolerr.Unauthorized, "no member has claimed this pod yet: its token calls no tool")), nil
		}
		name := ctr.Params.Name
		ns, known := g.toolNamespaces[name]
		if !known {
			g.svc.metrics.toolCalls.WithLabelValues("unknown", string(toolerr.InvalidArgument)).Inc()
			return errorResult(toolerr.New(toolerr.InvalidArgument, "no tool %q on this gateway; its namespaces are bridge, team and process (GET /v1/mcp/capabilities lists what is on)", excerpt(name, 64))), nil
		}
		if !g.svc.opts.enabled(ns) {
			g.svc.metrics.toolCalls.WithLabelValues(name, string(toolerr.FeatureDisabled)).Inc()
			return errorResult(toolerr.New(toolerr.FeatureDisabled, "the %s namespace is switched off on this gateway; GET /v1/mcp/capabilities lists what is on", ns)), nil
		}
		res, err := next(ctx, method, req)
		ctres, ok := res.(*mcp.CallToolResult)
		if !ok || err != nil || !ctres.IsError {
			return res, err
		}
		// A handler's error result carries its output type's zero fields
		// beside the error; a failed call shows the error alone.
		var body errorBody
		if raw, ok := ctres.StructuredContent.(json.RawMessage); ok && json.Unmarshal(raw, &body) == nil && body.Error != nil {
			return errorResult(body.Error), nil
		}
		msg := "invalid arguments"
		if len(ctres.Content) > 0 {
			if t, ok := ctres.Content[0].(*mcp.TextContent); ok {
				msg = t.Text
			}
		}
		g.svc.metrics.toolCalls.WithLabelValues(name, string(toolerr.InvalidArgument)).Inc()
		return errorResult(toolerr.New(toolerr.InvalidArgument, "%s", msg)), nil
	}
}

// errorResult is a tool result carrying a structured error.
func errorResult(te *toolerr.Error) *mcp.CallToolResult {
	body, err := json.Marshal(errorBody{Error: te})
	if err != nil {
		body = []byte(`{"error":{"code":"internal","message":"encoding an error"}}`)
	}
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: te.Error()}},
		StructuredContent: json.RawMessage(body),
	}
}
