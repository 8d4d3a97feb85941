package devenv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// probeEnv, when set, makes this test binary a member's probe: it tries
// the endpoints and files the variable names (a probeRequest) and prints
// what answered it, as JSON.
const probeEnv = "FLEETD_DEVENV_PROBE"

func TestMain(m *testing.M) {
	if req := os.Getenv(probeEnv); req != "" {
		os.Exit(runProbe(req))
	}
	os.Exit(m.Run())
}

type probeRequest struct {
	// Addrs are host:port of every listening socket of the control plane.
	Addrs []string
	// Files are state files and directories that must stay closed.
	Files []string
}

// TestMembersReachNothingOfTheControlPlane starts the control plane as
// `fleetd dev` does and, as a member's Unix user (an unprivileged user of
// the pane server's range), tries every socket its processes listen on and
// the state they keep: no etcd request, no API server request without
// credentials, and no state file may answer that user.
func TestMembersReachNothingOfTheControlPlane(t *testing.T) {
	bin := controlPlaneDir(t)
	if !paneserver.CanSwitchUsers() {
		t.Skip("needs root, or CAP_SETUID and CAP_SETGID, to act as a member's user")
	}
	state := t.TempDir()
	// As `fleetd dev` leaves it when members run as users of their own:
	// traversable, so they reach their directories, never listable.
	for _, dir := range []string{filepath.Dir(state), state} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(state, "controlplane")
	// A state directory made open by an earlier, careless run.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	etcdPort, apiPort := freePortPair(t), freePortPair(t)
	cp := &ControlPlane{Dir: dir, BinDir: bin, EtcdPort: etcdPort, APIServerPort: apiPort}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := cp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	waitForControllerManager(ctx, t, cp)

	var addrs []string
	for _, p := range []*Process{cp.etcd, cp.apiserver, cp.kcm} {
		addrs = append(addrs, listeningAddrs(t, p.Pid())...)
	}
	for _, want := range []string{hostPort(etcdPort), hostPort(etcdPort + 1), hostPort(apiPort)} {
		if !contains(addrs, want) {
			t.Fatalf("the control plane listens on %v, not on %s: the probe would miss it", addrs, want)
		}
	}
	p := cp.pki()
	files := []string{
		cp.Dir, cp.Kubeconfig(), cp.LogDir(), filepath.Join(cp.LogDir(), "etcd.log"),
		filepath.Join(cp.Dir, "etcd"), filepath.Join(cp.Dir, "etcd", "member", "snap", "db"),
		p.dir, p.path(caKey), p.path(adminKey), p.path(serverKey), p.path(saKey), p.path(etcdKey), p.path(etcdClientKey),
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the probe would miss %s: %v", f, err)
		}
	}

	answered := probeAsMember(t, state, probeRequest{Addrs: addrs, Files: files})
	for _, a := range answered {
		t.Errorf("a member's user got an answer: %s", a)
	}
}

// controlPlaneDir is where the control plane's binaries are, or skips (fails
// under FLEETD_REQUIRE_APISERVER) when they are not built.
func controlPlaneDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(testenv.RepoRoot(), "bin", "controlplane")
	}
	if err := CheckBinaries(dir); err != nil {
		if os.Getenv(testenv.RequireEnv) != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return dir
}

// waitForControllerManager waits until kube-controller-manager has made the
// default ServiceAccount: its controllers run, so every port it opens is
// open.
func waitForControllerManager(ctx context.Context, t *testing.T, cp *ControlPlane) {
	t.Helper()
	cfg, err := cp.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "default"}, &corev1.ServiceAccount{}) == nil, nil
	})
	if err != nil {
		t.Fatalf("kube-controller-manager made no default ServiceAccount: %v; see %s", err, cp.kcm.Log)
	}
}

// freePortPair is a free port whose successor is free too (etcd's peer
// port is its client port plus one).
func freePortPair(t *testing.T) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		next, err := net.Listen("tcp", hostPort(port+1))
		ln.Close()
		if err == nil {
			next.Close()
			return port
		}
	}
	t.Fatal("no two free ports in a row")
	return 0
}

// listeningAddrs are the TCP sockets process pid listens on, as a member
// would dial them.
func listeningAddrs(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err != nil {
			continue
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var addrs []string
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			const listen = "0A"
			if len(fields) < 10 || fields[3] != listen || !inodes[fields[9]] {
				continue
			}
			addr, err := dialable(fields[1])
			if err != nil {
				t.Fatalf("%s in /proc/%d/net/%s: %v", fields[1], pid, table, err)
			}
			addrs = append(addrs, addr)
		}
		f.Close()
	}
	return addrs
}

// dialable turns a /proc/net/tcp{,6} address (hex, in host byte order by
// 32-bit word) into host:port, loopback for a wildcard.
func dialable(procAddr string) (string, error) {
	h, p, ok := strings.Cut(procAddr, ":")
	if !ok {
		return "", fmt.Errorf("no port")
	}
	raw, err := hex.DecodeString(h)
	if err != nil {
		return "", err
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return "", err
	}
	ip := make(net.IP, len(raw))
	for i := 0; i+4 <= len(raw); i += 4 {
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port))), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// probeAsMember runs this test binary as a member's user, the way the pane
// server runs a member's shell: a uid of the workspace range, its own
// group, no others.
func probeAsMember(t *testing.T, state string, req probeRequest) []string {
	t.Helper()
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	probeDir := filepath.Join(state, "probe")
	if err := os.Mkdir(probeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(probeDir, "probe")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	const uid = paneserver.DefaultFirstUID + 4242
	cmd := exec.Command(bin)
	cmd.Dir = probeDir
	cmd.Env = []string{probeEnv + "=" + string(raw)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probing as user %d: %v\n%s", uid, err, stderr.String())
	}
	var answered []string
	if err := json.Unmarshal(out, &answered); err != nil {
		t.Fatalf("the probe's output %q: %v", out, err)
	}
	return answered
}

// probePaths are what the control plane's processes serve: etcd's health,
// version, metrics and gateway, the API server's discovery, health and
// resources, a component's debug and config endpoints.
var probePaths = []string{
	"/", "/health", "/version", "/metrics", "/healthz", "/livez", "/readyz",
	"/api", "/apis", "/api/v1/secrets", "/api/v1/namespaces/default/secrets",
	"/debug/pprof/", "/configz", "/members",
}

// runProbe is the member's side: it returns 0 and prints what answered,
// non-zero when it could not probe at all.
func runProbe(raw string) int {
	var req probeRequest
	if err := json.Unmarshal([]byte(raw), &req); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	answered := []string{}
	for _, f := range req.Files {
		if fh, err := os.Open(f); err == nil {
			_, rerr := fh.Readdirnames(1)
			if rerr != nil {
				var b [1]byte
				_, rerr = fh.Read(b[:])
			}
			fh.Close()
			answered = append(answered, fmt.Sprintf("opened %s (read: %v)", f, rerr))
		}
	}
	// A member has no certificate; it may try TLS without one, or plain
	// HTTP.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the attacker checks no one
	}}
	// etcd's range over every key, through its gRPC gateway.
	rangeAll := `{"key":"AA==","range_end":"AA=="}`
	for _, addr := range req.Addrs {
		for _, scheme := range []string{"http", "https"} {
			base := scheme + "://" + addr
			type call struct{ method, path, body string }
			var calls []call
			for _, path := range probePaths {
				calls = append(calls, call{http.MethodGet, path, ""})
			}
			for _, path := range []string{"/v3/kv/range", "/v3beta/kv/range", "/v3alpha/kv/range"} {
				calls = append(calls, call{http.MethodPost, path, rangeAll})
			}
			for _, c := range calls {
				status, ok, err := answers(hc, c.method, base+c.path, c.body)
				if ok {
					answered = append(answered, fmt.Sprintf("%s %s%s: %s", c.method, base, c.path, status))
				}
				// A port that holds a request in the wrong protocol
				// answers no other either; do not wait on it again.
				if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
					break
				}
			}
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(answered); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// answers reports whether url gave a success to a caller with no
// credentials, and why it gave no answer at all.
func answers(hc *http.Client, method, url, body string) (string, bool, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return "", false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	return resp.Status, resp.StatusCode < 300, nil
}

func TestDialable(t *testing.T) {
	cases := map[string]string{
		"0100007F:0050":                         "127.0.0.1:80",
		"00000000:1F90":                         "127.0.0.1:8080",
		"00000000000000000000000001000000:1F90": "[::1]:8080",
		"00000000000000000000000000000000:0016": "127.0.0.1:22",
	}
	for in, want := range cases {
		if got, err := dialable(in); err != nil || got != want {
			t.Errorf("dialable(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
