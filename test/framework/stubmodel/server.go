// Package stubmodel is a stand-in for a model's HTTP API, for running the
// real agent CLIs (Claude Code, Codex) with no network: the agent stays
// real, only the model is scripted. It speaks the Anthropic Messages API
// (streaming and not, count_tokens) as Claude Code uses it, and the OpenAI
// Responses API as Codex uses it.
//
// The model follows directives in the prompt, one per line:
//
//	reply: TEXT     call fleetd's bridge_reply with TEXT
//	ask: QUESTION   call bridge_ask; {answer} in later lines is the answer,
//	                and with no reply: after it, the answer is the reply
//	silent: TEXT    say TEXT and end the turn without replying
//	sleep: SECONDS  take that long before the next step
//	bash: COMMAND   run COMMAND with the agent's shell tool, which asks for
//	                permission unless allowed
//	send: MEMBER: CONTENT
//	                call bridge_send with wait:false, as a primary hands
//	                work to a member
//
// A prompt without directives is answered with a reply of "echo: <prompt>".
// Requests without tools (a session title, say) get plain text or the JSON
// they ask for. Every request is logged, so a test counts what the agent was
// sent: the images that came with a turn's prompt, and what the agent's
// hooks added to the conversation, among it.
package stubmodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// maxBody bounds a request body.
const maxBody = 64 << 20

// Kind says what a logged request was.
type Kind string

// Request kinds.
// The usage every answer reports, whatever it was sent, so a test can
// assert exact sums: per model call, the input not read from a cache, the
// input read from one, the input written to one (the Messages API only)
// and the output.
const (
	UsageInputTokens         = 1000
	UsageCachedTokens        = 2000
	UsageCacheCreationTokens = 300
	UsageOutputTokens        = 40
)

const (
	// KindTurn is a step of a turn: the agent's main loop, with tools.
	KindTurn Kind = "turn"
	// KindSide is a request without tools, such as a session title.
	KindSide Kind = "side"
	// KindClassifier is a permission classifier's question (Claude Code's
	// auto mode).
	KindClassifier Kind = "classifier"
	// KindCountTokens counts a prompt's tokens.
	KindCountTokens Kind = "count_tokens"
	// KindOther is anything else.
	KindOther Kind = "other"
)

// Request is one request the server answered.
type Request struct {
	Time time.Time `json:"time"`
	// API is "anthropic" or "responses".
	API    string `json:"api"`
	Method string `json:"method"`
	Path   string `json:"path"`
	Kind   Kind   `json:"kind"`
	Model  string `json:"model,omitempty"`
	Stream bool   `json:"stream,omitempty"`
	// Prompt is the turn's prompt, for turn steps.
	Prompt string `json:"prompt,omitempty"`
	// Step counts the tool results the turn had when this step was asked
	// for: 0 is the turn's first request.
	Step int `json:"step"`
	// Answer says what the model did: a tool's name, or "text".
	Answer string `json:"answer,omitempty"`
	// Tools names the tools the request offered.
	Tools []string `json:"tools,omitempty"`
	// Images are the images the turn's prompt came with.
	Images []Image `json:"images,omitempty"`
	// Earlier are the prompts of the conversation's earlier turns that the
	// request carries, oldest first: an agent resumed on a saved session
	// sends the turns it had before.
	Earlier []string `json:"earlier,omitempty"`
	// HookFeedback is what the agent's hooks added to the conversation,
	// such as the reason of a Stop hook that kept the turn going, oldest
	// first.
	HookFeedback []string `json:"hookFeedback,omitempty"`
}

// Image is an image a request carries.
type Image struct {
	MediaType string `json:"mediaType"`
	// SHA256 is the hex digest of the image's bytes.
	SHA256 string `json:"sha256"`
	Size   int    `json:"size"`
}

// Server answers the model API. Its zero value is not usable; use New.
type Server struct {
	mux *http.ServeMux

	mu   sync.Mutex
	log  []Request
	file io.Writer
}

// New returns a Server. With logPath set, every request is also appended to
// that file as a JSON line.
func New(logPath string) (*Server, error) {
	s := &Server{mux: http.NewServeMux()}
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		s.file = f
	}
	s.mux.HandleFunc("POST /v1/messages", s.messages)
	s.mux.HandleFunc("POST /v1/messages/count_tokens", s.countTokens)
	s.mux.HandleFunc("POST /v1/responses", s.responses)
	s.mux.HandleFunc("/", s.other)
	return s, nil
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Requests returns every request answered so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// Turns counts how many turns each prompt started: the first step of a turn
// is the agent acting on a prompt it was given.
func (s *Server) Turns() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	turns := map[string]int{}
	for _, r := range s.log {
		if r.Kind == KindTurn && r.Step == 0 {
			turns[r.Prompt]++
		}
	}
	return turns
}

func (s *Server) record(r Request) {
	r.Time = time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, r)
	if s.file != nil {
		if line, err := json.Marshal(r); err == nil {
			_, _ = s.file.Write(append(line, '\n'))
		}
	}
}

// other answers whatever else an agent asks at start, such as Claude
// Code's connectivity check, with an empty success.
func (s *Server) other(w http.ResponseWriter, r *http.Request) {
	s.record(Request{API: "other", Method: r.Method, Path: r.URL.Path, Kind: KindOther})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("{}"))
}

// sleep waits d unless the request ends first.
func sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// eventStream starts a server-sent events response on w and returns what
// sends one event, flushed at once.
func eventStream(w http.ResponseWriter) func(event string, data any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	return func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
