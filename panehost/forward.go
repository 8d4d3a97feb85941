package panehost

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"time"
)

// tokenRecheck is how often the forwarder looks whether the kubelet
// rotated the token file; the kubelet refreshes it well before it expires.
const tokenRecheck = 10 * time.Second

// Retrying a request the gateway never got: for how long, how often, and
// how long one connection may take. A replica that died with its node
// leaves its Pod's address in the Service until the node is found lost
// (tens of seconds), and a connection to it hangs: each attempt gives up
// soon and tries again, and the Service picks a replica afresh for it.
const (
	retryFor   = 30 * time.Second
	retryEvery = 100 * time.Millisecond
	dialFor    = 2 * time.Second
	// maxForwardBody bounds what is held to be sent again: more than the
	// gateway takes in one request (a message and its images).
	maxForwardBody = 64 << 20
)

// Forwarder passes a pod's requests to the gateway with the pod's current
// service-account token. It listens on loopback only: the agent mounts the
// gateway through it and never holds a credential; a rotated token is
// picked up without the agent's connection noticing.
type Forwarder struct {
	proxy *httputil.ReverseProxy
	token *tokenFile
}

// NewForwarder forwards to the gateway at gateway (its base URL: scheme
// and host) with the token in the file at tokenPath.
func NewForwarder(gateway, tokenPath string) (*Forwarder, error) {
	u, err := url.Parse(gateway)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("the gateway's URL %q must have a scheme and a host", gateway)
	}
	t := &tokenFile{path: tokenPath}
	if _, err := t.get(); err != nil {
		return nil, err
	}
	f := &Forwarder{token: t}
	f.proxy = &httputil.ReverseProxy{
		Transport: newRetryingTransport(),
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = u.Host
			// Whatever the agent sent as a credential is not its to send.
			r.Out.Header.Del("Authorization")
			r.Out.Header.Del("Cookie")
			if tok, err := t.get(); err == nil {
				r.Out.Header.Set("Authorization", "Bearer "+tok)
			}
		},
		// Held calls stream their progress: pass every byte on at once.
		FlushInterval: -1,
	}
	return f, nil
}

// ServeHTTP implements http.Handler.
func (f *Forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.proxy.ServeHTTP(w, r) }

// tokenFile is a token file read again when it may have rotated.
type tokenFile struct {
	path string

	mu      sync.Mutex
	read    time.Time
	modTime time.Time
	token   string
}

func (t *tokenFile) get() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if t.token != "" && now.Sub(t.read) < tokenRecheck {
		return t.token, nil
	}
	t.read = now
	fi, err := os.Stat(t.path)
	if err == nil && t.token != "" && fi.ModTime().Equal(t.modTime) {
		return t.token, nil
	}
	raw, rerr := os.ReadFile(t.path)
	if err != nil || rerr != nil || len(bytes.TrimSpace(raw)) == 0 {
		if t.token != "" {
			return t.token, nil
		}
		return "", fmt.Errorf("reading the pod's token %s: %w", t.path, errOr(err, rerr))
	}
	t.token, t.modTime = string(bytes.TrimSpace(raw)), fi.ModTime()
	return t.token, nil
}

func errOr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return fmt.Errorf("the file is empty")
}

// retryingTransport carries the agent's requests to the gateway Service,
// whose replicas come and go: a replica that crashed leaves a connection
// that fails, and the Service sends new ones to it until its endpoints
// catch up. Each request gets a connection of its own, so that the Service
// picks a live replica for it, and a request that never reached the
// gateway (its connection was refused or reset before a byte went out) is
// tried again, on another connection, for up to retryFor. A request that
// may have reached it is sent again only when the gateway takes it twice
// as once (repeatable): a message must not be sent twice.
type retryingTransport struct {
	rt http.RoundTripper
}

func newRetryingTransport() *retryingTransport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableKeepAlives = true
	t.DialContext = (&net.Dialer{Timeout: dialFor, KeepAlive: 30 * time.Second}).DialContext
	return &retryingTransport{rt: t}
}

// RoundTrip implements http.RoundTripper.
func (t *retryingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, maxForwardBody+1))
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		if len(body) > maxForwardBody {
			return nil, fmt.Errorf("a request body over %d bytes", maxForwardBody)
		}
	}
	again := repeatable(r.Method, body)
	deadline := time.Now().Add(retryFor)
	for {
		out := r.Clone(r.Context())
		if body != nil {
			out.Body = io.NopCloser(bytes.NewReader(body))
			out.ContentLength = int64(len(body))
		}
		resp, err := t.rt.RoundTrip(out)
		if err == nil || !(again || unsent(err)) || r.Context().Err() != nil || time.Now().After(deadline) {
			return resp, err
		}
		select {
		case <-r.Context().Done():
			return nil, err
		case <-time.After(retryEvery):
		}
	}
}

// unsent reports whether err says the request never reached the server:
// its connection was not made.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// repeatableTools are the gateway's tools whose call, sent twice, does what
// one does: the gateway records the same bridge_reply once and answers the
// repeat with the same result.
var repeatableTools = map[string]bool{"bridge_reply": true}

// repeatableMethods are the MCP requests and notifications that change
// nothing the agent could see twice: a session opened again (the one on a
// replica that died is gone with it), a list, a ping.
var repeatableMethods = map[string]bool{
	"initialize": true, "notifications/initialized": true, "ping": true,
	"tools/list": true, "resources/list": true, "prompts/list": true,
}

// repeatable reports whether a request of method with body may be sent
// again when its answer is lost (the replica that took it died): a GET (the
// event stream) or DELETE (the session's end), or a repeatable MCP message,
// rather than leaving the agent with an error for what it can simply do
// again.
func repeatable(method string, body []byte) bool {
	if method == http.MethodGet || method == http.MethodDelete {
		return true
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return false
	}
	return repeatableMethods[msg.Method] || msg.Method == "tools/call" && repeatableTools[msg.Params.Name]
}
