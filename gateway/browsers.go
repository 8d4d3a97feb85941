package gateway

import (
	"net"
	"net/http"
	"strings"

	"github.com/fleetd/fleetd/gateway/toolerr"
)

// refuseOtherSites refuses, before anything else sees them, the requests a
// web page of another site could make a browser send to the gateway, as
// the MCP transport requires of servers (validate Host and Origin; an
// invalid one is answered 403):
//   - DNS rebinding: a page whose site name now resolves to 127.0.0.1
//     reaches a gateway listening on loopback as "its own" site, so the
//     browser sends the page's name as the Host. A request that arrived
//     on a loopback address must name a loopback host: localhost,
//     127.0.0.1 or [::1], any port.
//   - Cross-origin writes: a request that is not GET, HEAD or OPTIONS and
//     whose Origin (or Sec-Fetch-Site) says another site's page sent it is
//     refused, wherever the gateway listens.
//
// MCP clients and other programs send no Origin, and name the host they
// dialled, so they are not affected. The bearer token remains the real
// guard (no other site's page can set it); this keeps a page from even
// reaching the code behind it.
func refuseOtherSites(next http.Handler) http.Handler {
	crossOrigin := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && isLoopback(local.String()) && !isLoopback(r.Host) {
			writeError(w, toolerr.New(toolerr.Forbidden, "the Host header %q is not a loopback host, on a loopback address: a DNS rebinding attack is refused", r.Host))
			return
		}
		if err := crossOrigin.Check(r); err != nil {
			writeError(w, toolerr.New(toolerr.Forbidden, "%v: a request from another site's page is refused", err))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isLoopback reports whether a host, with or without a port, is localhost
// or a loopback IP address.
func isLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
