package herdr

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxResponseLine bounds one line from herdr. A snapshot of a busy session
// runs to a few MiB; anything far beyond that is a broken server.
const maxResponseLine = 64 << 20

// Request is one request line.
type Request struct {
	// ID is echoed in the response; herdr treats it as an opaque string.
	ID string `json:"id"`
	// Method is the method name, e.g. "pane.read".
	Method string `json:"method"`
	// Params are the method's params; herdr wants {} for methods without any.
	Params any `json:"params"`
}

// response is one response line: exactly one of Result and Error is set.
type response struct {
	ID     string
	Result json.RawMessage
	Error  *Error
}

var errLineTooLong = errors.New("line too long")

// encodeRequest renders a request as one line, newline included.
func encodeRequest(id, method string, params any) ([]byte, error) {
	if params == nil {
		params = EmptyParams{}
	}
	line, err := json.Marshal(Request{ID: id, Method: method, Params: params})
	if err != nil {
		return nil, fmt.Errorf("encoding %s request: %w", method, err)
	}
	return append(line, '\n'), nil
}

// readLine reads one newline-terminated line without the newline. A line cut
// short by EOF is an error: herdr always terminates its lines.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'}), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// decodeResponse decodes a response line and checks its shape.
func decodeResponse(line []byte) (*response, error) {
	var frame struct {
		ID     *string         `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *Error          `json:"error"`
	}
	if err := json.Unmarshal(line, &frame); err != nil {
		return nil, fmt.Errorf("%w: response is not a JSON object: %w", ErrProtocol, err)
	}
	if frame.ID == nil {
		return nil, fmt.Errorf("%w: response has no id", ErrProtocol)
	}
	hasResult := len(frame.Result) > 0 && !bytes.Equal(frame.Result, []byte("null"))
	switch {
	case frame.Error != nil && hasResult:
		return nil, fmt.Errorf("%w: response has both result and error", ErrProtocol)
	case frame.Error != nil:
		if frame.Error.Code == "" {
			return nil, fmt.Errorf("%w: error response has no code", ErrProtocol)
		}
		return &response{ID: *frame.ID, Error: frame.Error}, nil
	case hasResult:
		return &response{ID: *frame.ID, Result: frame.Result}, nil
	default:
		return nil, fmt.Errorf("%w: response has neither result nor error", ErrProtocol)
	}
}

// decodeResult checks a result's type and decodes it into out, if not nil.
func decodeResult(raw json.RawMessage, wantType string, out any) error {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return fmt.Errorf("%w: result is not an object: %w", ErrProtocol, err)
	}
	if head.Type != wantType {
		return fmt.Errorf("%w: result type %q, want %q", ErrProtocol, head.Type, wantType)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%w: decoding %s result: %w", ErrProtocol, wantType, err)
	}
	return nil
}

// decodeEvent decodes a line that follows subscription_started. An error
// response there is returned as the *Error.
func decodeEvent(line []byte) (Event, error) {
	var frame struct {
		Event *EventKind      `json:"event"`
		Data  json.RawMessage `json:"data"`
		Error *Error          `json:"error"`
	}
	if err := json.Unmarshal(line, &frame); err != nil {
		return Event{}, fmt.Errorf("%w: event is not a JSON object: %w", ErrProtocol, err)
	}
	if frame.Error != nil {
		return Event{}, frame.Error
	}
	if frame.Event == nil || *frame.Event == "" {
		return Event{}, fmt.Errorf("%w: event line has no event kind", ErrProtocol)
	}
	if data := bytes.TrimSpace(frame.Data); len(data) == 0 || data[0] != '{' {
		return Event{}, fmt.Errorf("%w: %s event has no data object", ErrProtocol, *frame.Event)
	}
	ev := Event{Kind: *frame.Event}
	if err := json.Unmarshal(frame.Data, &ev.Data); err != nil {
		return Event{}, fmt.Errorf("%w: decoding %s event: %w", ErrProtocol, ev.Kind, err)
	}
	return ev, nil
}
