package gateway

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fleetd/fleetd/gateway/toolerr"
)

// TestRefuseOtherSites: on a loopback address only a loopback Host gets
// through (DNS rebinding); anywhere, a write from another site's page is
// refused; programs, which send no Origin, are not affected.
func TestRefuseOtherSites(t *testing.T) {
	loopback := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	podIP := &net.TCPAddr{IP: net.IPv4(10, 244, 1, 7), Port: 8080}
	cases := map[string]struct {
		local   net.Addr
		method  string
		host    string
		headers map[string]string
		refused bool
	}{
		"a program on loopback":                   {local: loopback, method: http.MethodPost, host: "127.0.0.1:8080"},
		"localhost":                               {local: loopback, method: http.MethodPost, host: "localhost:8080"},
		"LOCALHOST without a port":                {local: loopback, method: http.MethodPost, host: "LOCALHOST"},
		"IPv6 loopback":                           {local: loopback, method: http.MethodPost, host: "[::1]:8080"},
		"another loopback address":                {local: loopback, method: http.MethodPost, host: "127.0.0.2:8080"},
		"a page of the same origin":               {local: loopback, method: http.MethodPost, host: "localhost:8080", headers: map[string]string{"Origin": "http://localhost:8080", "Sec-Fetch-Site": "same-origin"}},
		"a rebound name":                          {local: loopback, method: http.MethodPost, host: "evil.example.com:8080", headers: map[string]string{"Origin": "http://evil.example.com:8080"}, refused: true},
		"a rebound name, read":                    {local: loopback, method: http.MethodGet, host: "evil.example.com", refused: true},
		"a name that starts like localhost":       {local: loopback, method: http.MethodPost, host: "localhost.evil.example.com", refused: true},
		"a name that starts like a loopback IP":   {local: loopback, method: http.MethodPost, host: "127.0.0.1.evil.example.com", refused: true},
		"another site's page on loopback":         {local: loopback, method: http.MethodPost, host: "127.0.0.1:8080", headers: map[string]string{"Origin": "http://evil.example.com"}, refused: true},
		"another site's page, by Sec-Fetch-Site":  {local: loopback, method: http.MethodDelete, host: "127.0.0.1:8080", headers: map[string]string{"Sec-Fetch-Site": "cross-site"}, refused: true},
		"another site's page reading":             {local: loopback, method: http.MethodGet, host: "127.0.0.1:8080", headers: map[string]string{"Origin": "http://evil.example.com"}},
		"a Service name on a pod address":         {local: podIP, method: http.MethodPost, host: "fleetd-gateway.fleetd-system.svc:8080"},
		"another site's page on a pod address":    {local: podIP, method: http.MethodPost, host: "fleetd-gateway.fleetd-system.svc:8080", headers: map[string]string{"Origin": "http://evil.example.com"}, refused: true},
		"a same-origin page on a pod address":     {local: podIP, method: http.MethodPost, host: "gw.example.com", headers: map[string]string{"Origin": "https://gw.example.com"}},
		"no local address known (not a listener)": {method: http.MethodPost, host: "evil.example.com"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reached := false
			h := refuseOtherSites(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
			req := httptest.NewRequest(tc.method, "/mcp", nil)
			req.Host = tc.host
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			if tc.local != nil {
				req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, tc.local))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if !tc.refused {
				if !reached || rec.Code != http.StatusOK {
					t.Fatalf("refused (%d %s), want it through", rec.Code, rec.Body)
				}
				return
			}
			if reached || rec.Code != http.StatusForbidden {
				t.Fatalf("answered %d (reached the handler: %v), want 403 before the handler", rec.Code, reached)
			}
			var body errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error == nil || body.Error.Code != toolerr.Forbidden {
				t.Fatalf("want the gateway's forbidden error, got %s (%v)", rec.Body, err)
			}
		})
	}
}

// TestGatewayRefusesOtherSites: a running gateway refuses, with a valid
// token, an initialize whose Host is a rebound name or whose Origin is
// another site's, on /mcp and on REST; the same initialize from a program
// gets through.
func TestGatewayRefusesOtherSites(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	local := strings.TrimPrefix(h.url, "http://")
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"v0"}}}`
	cases := map[string]struct {
		path    string
		host    string
		origin  string
		refused bool
	}{
		"a program":                      {path: "/mcp", host: local},
		"a program by localhost":         {path: "/mcp", host: "localhost:" + strings.Split(local, ":")[1]},
		"a page of the gateway's origin": {path: "/mcp", host: local, origin: h.url},
		"a rebound name":                 {path: "/mcp", host: "evil.example.com", origin: "http://evil.example.com", refused: true},
		"another site's page":            {path: "/mcp", host: local, origin: "http://evil.example.com", refused: true},
		"another site's page, over REST": {path: "/members", host: local, origin: "http://evil.example.com", refused: true},
		"a rebound name, over REST":      {path: "/members", host: "evil.example.com", refused: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, h.url+tc.path, strings.NewReader(initialize))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tc.host
			req.Header.Set("Authorization", "Bearer "+staticToken)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body errorBody
			_ = json.NewDecoder(resp.Body).Decode(&body)
			switch {
			case tc.refused && (resp.StatusCode != http.StatusForbidden || body.Error == nil || body.Error.Code != toolerr.Forbidden):
				t.Fatalf("answered %s %+v, want 403 forbidden", resp.Status, body.Error)
			case !tc.refused && resp.StatusCode != http.StatusOK:
				t.Fatalf("answered %s %+v, want 200", resp.Status, body.Error)
			}
		})
	}
}
