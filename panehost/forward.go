package panehost

import (
	"bytes"
	"fmt"
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
