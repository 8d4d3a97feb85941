package sse

import (
	"net/http/httptest"
	"testing"
	"time"
)

func TestParseEvent(t *testing.T) {
	cases := map[string]struct {
		in     string
		name   string
		data   string
		wantOK bool
	}{
		"an event":          {in: "event: message\ndata: {\"id\":1}\n\n", name: "message", data: `{"id":1}`, wantOK: true},
		"empty data":        {in: "event: ping\ndata: \n\n", name: "ping", wantOK: true},
		"two events":        {in: "event: a\ndata: 1\n\nevent: b\ndata: 2\n\n"},
		"an id field":       {in: "event: message\nid: 7\ndata: {}\n\n"},
		"no name":           {in: "data: {}\n\n"},
		"unterminated":      {in: "event: message\ndata: {}\n"},
		"a carriage return": {in: "event: message\r\ndata: {}\n\n"},
		"a comment":         {in: Keepalive},
		"nothing":           {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n, data, ok := ParseEvent([]byte(tc.in))
			if ok != tc.wantOK || n != tc.name || string(data) != tc.data {
				t.Fatalf("ParseEvent(%q) = %q, %q, %v; want %q, %q, %v", tc.in, n, data, ok, tc.name, tc.data, tc.wantOK)
			}
			if ok {
				if again := string(AppendEvent(nil, n, data)); again != tc.in {
					t.Errorf("AppendEvent of what ParseEvent read: %q, want %q", again, tc.in)
				}
			}
		})
	}
}

func TestWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewWriter(rec, time.Second)
	if err := w.Event("hello", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.Keepalive(); err != nil {
		t.Fatal(err)
	}
	w.Done()
	if want := "event: hello\ndata: {\"a\":1}\n\n:\n\n"; rec.Body.String() != want || !rec.Flushed {
		t.Errorf("wrote %q (flushed %v), want %q, flushed", rec.Body.String(), rec.Flushed, want)
	}
}
