// Package sse writes server-sent events, as the HTML living standard
// defines the text/event-stream format: the dashboard's live pages, and
// the held MCP calls the gateway answers itself, which must frame their
// events exactly as the MCP SDK does (package heldcall pins that with a
// test against the SDK).
package sse

import (
	"bytes"
	"net/http"
	"time"
)

// AppendEvent appends to b one event named name, carrying data. data must
// hold no line break (JSON as encoding/json writes it holds none): a line
// break would start another field.
func AppendEvent(b []byte, name string, data []byte) []byte {
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// Keepalive is a comment, which a client ignores: it keeps an idle stream
// open through proxies, and a failed write of it tells of a client gone.
const Keepalive = ":\n\n"

// ParseEvent is the inverse of AppendEvent: the name and data of b when b
// is exactly one event as AppendEvent frames it, else ok is false.
func ParseEvent(b []byte) (name string, data []byte, ok bool) {
	rest, ok := bytes.CutPrefix(b, []byte("event: "))
	if !ok {
		return "", nil, false
	}
	n, rest, ok := bytes.Cut(rest, []byte("\ndata: "))
	if !ok {
		return "", nil, false
	}
	data, ok = bytes.CutSuffix(rest, []byte("\n\n"))
	if !ok || bytes.ContainsAny(n, "\r\n") || bytes.ContainsAny(data, "\r\n") {
		return "", nil, false
	}
	return string(n), data, true
}

// A Writer writes events on an HTTP response whose header says
// text/event-stream. Each write is flushed at once and must finish within
// the Writer's timeout: a client that stopped reading ends its stream
// instead of holding the writer. A Writer is not safe for concurrent use.
type Writer struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

// NewWriter writes events on w, each write bounded by timeout.
func NewWriter(w http.ResponseWriter, timeout time.Duration) *Writer {
	return &Writer{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

// Event writes one event named name, carrying data (see AppendEvent).
func (s *Writer) Event(name string, data []byte) error {
	return s.write(AppendEvent(nil, name, data))
}

// Keepalive writes a comment (see Keepalive).
func (s *Writer) Keepalive() error { return s.write([]byte(Keepalive)) }

// Flush sends what is written so far, the header at least.
func (s *Writer) Flush() error { return s.rc.Flush() }

// Done lifts the write deadline, so that the connection may serve another
// request after the stream.
func (s *Writer) Done() { _ = s.rc.SetWriteDeadline(time.Time{}) }

func (s *Writer) write(frame []byte) error {
	// A writer that takes no deadline (a test's recorder) is written to
	// without one.
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if _, err := s.w.Write(frame); err != nil {
		return err
	}
	return s.rc.Flush()
}
