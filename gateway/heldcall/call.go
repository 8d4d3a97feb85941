package heldcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetd/fleetd/gateway/sse"
)

// writeTimeout bounds each write to a parked call's client.
const writeTimeout = 10 * time.Second

// A Call is a parked call as its Hold sees it: where its progress goes,
// and a wait that its client's hanging up ends. It is answered on the
// connection taken over from net/http, or on its request, or, when its
// client is gone before it could be answered, not at all.
type Call struct {
	// id is the JSON-RPC id the SDK answered the placeholder with.
	id jsonrpc.ID
	// envelope is what the SDK put in the placeholder's result beside the
	// tool's own fields, in its order (_meta and resultType, on the
	// revisions that have them): the call's result carries it too.
	envelope []resultField

	// conn is the connection taken over; Wait reads it to see the client
	// hang up, and Wake ends the read with a deadline in the past.
	conn net.Conn
	buf  [1]byte

	// events writes on the request when the call is answered on it; gone
	// is closed when its client hangs up, and wake ends a Wait.
	events *sse.Writer
	gone   <-chan struct{}
	wake   chan struct{}
}

// resultField is one field of a result, as JSON.
type resultField struct {
	name  string
	value json.RawMessage
}

// Progress sends a progress notification. A failed write is not reported:
// a client that is gone ends the hold through Wait.
func (c *Call) Progress(p *mcp.ProgressNotificationParams) {
	params, err := marshal(p)
	if err != nil {
		return
	}
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: "notifications/progress", Params: params})
	if err != nil {
		return
	}
	_ = c.send(data)
}

// Wait blocks until Wake is called, since the last Wait returned or
// during this one, and reports true; or until the client hangs up, and
// reports false, now and on every later Wait. It may also return true
// without a Wake: the caller checks what woke it, and waits again.
func (c *Call) Wait() bool {
	switch {
	case c.conn != nil:
		for {
			_, err := c.conn.Read(c.buf[:])
			switch {
			case err == nil:
				// A client sends nothing more on the connection (HTTP/1.1
				// waits for the response); anything it does send is
				// dropped.
			case errors.Is(err, os.ErrDeadlineExceeded):
				// Lifted before the caller looks, so that a Wake after
				// it ends the next Wait.
				_ = c.conn.SetReadDeadline(time.Time{})
				return true
			default:
				return false
			}
		}
	case c.wake != nil:
		select {
		case <-c.wake:
			return true
		case <-c.gone:
			return false
		}
	default:
		return false
	}
}

// Wake ends the current Wait, or the next one. It does not block, and it
// may be called from any goroutine, also after the call was answered.
func (c *Call) Wake() {
	switch {
	case c.conn != nil:
		_ = c.conn.SetReadDeadline(aLongTimeAgo)
	case c.wake != nil:
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// aLongTimeAgo is a read deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)

// newCall reads the SDK's answer to the placeholder: one event, whose data
// is the JSON-RPC response with the call's id and the placeholder's
// result.
func newCall(answer []byte) (*Call, error) {
	name, data, ok := sse.ParseEvent(answer)
	if !ok || name != "message" {
		return nil, fmt.Errorf("the SDK answered with %q, not one message event", excerpt(answer))
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return nil, fmt.Errorf("decoding the SDK's answer %q: %w", excerpt(answer), err)
	}
	resp, ok := msg.(*jsonrpc.Response)
	if !ok || !resp.ID.IsValid() || resp.Error != nil {
		return nil, fmt.Errorf("the SDK answered with %q, not a result", excerpt(answer))
	}
	envelope, err := envelopeOf(resp.Result)
	if err != nil {
		return nil, fmt.Errorf("decoding the SDK's result %q: %w", excerpt(answer), err)
	}
	return &Call{id: resp.ID, envelope: envelope}, nil
}

// envelopeOf is the fields of result other than a tool's own, in order.
func envelopeOf(result json.RawMessage) ([]resultField, error) {
	dec := json.NewDecoder(bytes.NewReader(result))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not an object")
	}
	var envelope []resultField
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := t.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		switch name {
		case "content", "structuredContent", "isError":
		default:
			envelope = append(envelope, resultField{name: name, value: value})
		}
	}
	return envelope, nil
}

// result is res as the SDK would have answered it, with the envelope the
// SDK put on the placeholder's: the envelope's _meta keys that res lacks
// join its _meta (the SDK's own annotation does the same), and its other
// fields follow res's, as the SDK writes a typed result. An error result
// goes without resultType: the gateway's tool middleware answers errors
// with results of its own, made after the SDK typed the handler's, and a
// parked call's error must read as the same error answered at once.
func (c *Call) result(res *mcp.CallToolResult) (json.RawMessage, error) {
	r := *res
	var after []resultField
	for _, f := range c.envelope {
		switch {
		case f.name == "_meta":
			var meta map[string]json.RawMessage
			if err := json.Unmarshal(f.value, &meta); err != nil {
				return nil, fmt.Errorf("the SDK's _meta: %w", err)
			}
			r.Meta = maps.Clone(r.Meta)
			if r.Meta == nil {
				r.Meta = mcp.Meta{}
			}
			for k, v := range meta {
				if _, ok := r.Meta[k]; !ok {
					r.Meta[k] = v
				}
			}
		case f.name == "resultType" && res.IsError:
		default:
			after = append(after, f)
		}
	}
	raw, err := marshal(&r)
	if err != nil || len(after) == 0 {
		return raw, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	out, empty := bytes.TrimSuffix(raw, []byte("}")), len(fields) == 0
	for _, f := range after {
		if _, ok := fields[f.name]; ok {
			continue
		}
		name, err := marshal(f.name)
		if err != nil {
			return nil, err
		}
		if !empty {
			out = append(out, ',')
		}
		out, empty = append(append(append(out, name...), ':'), f.value...), false
	}
	return append(out, '}'), nil
}

// marshal is json.Marshal without HTML escaping, as the SDK encodes.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// run holds the call and answers it with what hold returns.
func (c *Call) run(hold Hold, log logr.Logger) {
	err := c.answer(hold(c))
	if err != nil && !errors.Is(err, net.ErrClosed) {
		log.V(1).Info("Could not answer a parked call", "error", err.Error())
	}
	c.end()
}

func (c *Call) answer(res *mcp.CallToolResult) error {
	raw, err := c.result(res)
	if err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: c.id, Result: raw})
	if err != nil {
		return err
	}
	return c.send(data)
}

// send writes one JSON-RPC message as an event, as the SDK frames it.
func (c *Call) send(data []byte) error {
	switch {
	case c.conn != nil:
		var chunk bytes.Buffer
		if _, err := httputil.NewChunkedWriter(&chunk).Write(sse.AppendEvent(nil, "message", data)); err != nil {
			return err
		}
		return c.write(chunk.Bytes())
	case c.events != nil:
		return c.events.Event("message", data)
	default:
		return net.ErrClosed
	}
}

// end ends the response: on a connection taken over, the last chunk and
// the empty trailer, and the connection closes.
func (c *Call) end() {
	switch {
	case c.conn != nil:
		var last bytes.Buffer
		_ = httputil.NewChunkedWriter(&last).Close()
		last.WriteString("\r\n")
		_ = c.write(last.Bytes())
		_ = c.conn.Close()
	case c.events != nil:
		c.events.Done()
	}
}

// takeOver answers the call on conn, which net/http gave up: the status
// line and header (the SDK's, chunked, and closing the connection after)
// at once, the events as they come.
func (c *Call) takeOver(conn net.Conn, header http.Header) error {
	header.Set("Connection", "close")
	header.Set("Transfer-Encoding", "chunked")
	header.Del("Content-Length")
	header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 200 OK\r\n")
	if err := header.Write(&head); err != nil {
		return err
	}
	head.WriteString("\r\n")
	c.conn = conn
	return c.write(head.Bytes())
}

// onRequest answers the call on its request, whose header the SDK set.
func (c *Call) onRequest(w http.ResponseWriter, r *http.Request) {
	c.events = sse.NewWriter(w, writeTimeout)
	c.gone = r.Context().Done()
	c.wake = make(chan struct{}, 1)
}

func (c *Call) write(b []byte) error {
	if err := c.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	_, err := c.conn.Write(b)
	return err
}

// excerpt is the start of what the SDK wrote, for a log.
func excerpt(b []byte) []byte {
	const most = 200
	if len(b) > most {
		return b[:most]
	}
	return b
}
