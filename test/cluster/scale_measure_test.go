package cluster

// How BenchmarkScale measures: memory and connections from the nodes'
// cgroups and /proc, API requests from the API server's own metrics.

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/fleetd/fleetd/panehost"
)

// podMemory is the memory of each member's Pod.
type podMemory struct {
	rss, anon []int64
}

func (p podMemory) meanRSS() float64  { return mean(p.rss) }
func (p podMemory) meanAnon() float64 { return mean(p.anon) }
func (p podMemory) maxRSS() float64   { return float64(slices.Max(p.rss)) }

func mean(v []int64) float64 {
	var sum int64
	for _, x := range v {
		sum += x
	}
	return float64(sum) / float64(len(v))
}

// podMemory reads the memory of the members' Pods from their cgroups on
// the nodes: the resident memory (VmRSS) of every process in the Pod's
// cgroup (the sandbox, the pane host, the shell and the agent), and the
// anonymous memory the cgroup is charged (memory.stat total_rss), which
// counts pages shared between the Pod's processes once.
func (r *scaleRun) podMemory(b *testing.B, v cache.Cache, ns string, members []string) podMemory {
	b.Helper()
	dirs := podCgroups(b)
	var p podMemory
	for _, name := range members {
		m := r.member(b, v, ns, name)
		dir, ok := dirs[m.Status.PodUID]
		if !ok {
			b.Fatalf("member %s: no cgroup for pod %s under %s", name, m.Status.PodUID, memoryCgroupRoot())
		}
		p.rss = append(p.rss, treeRSS(dir))
		p.anon = append(p.anon, cgroupStat(dir, "total_rss"))
	}
	return p
}

func memoryCgroupRoot() string { return filepath.Join("/sys/fs/cgroup/memory", testName) }

// podCgroups maps each Pod's UID to its memory cgroup: the kubelets
// (cgroupfs driver) name it pod<UID> under kubepods/<QoS class>.
func podCgroups(tb testing.TB) map[string]string {
	tb.Helper()
	dirs := map[string]string{}
	err := filepath.WalkDir(memoryCgroupRoot(), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if uid, ok := strings.CutPrefix(d.Name(), "pod"); ok && strings.Contains(p, "/kubepods") {
			dirs[uid] = p
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return dirs
}

// cgroupPIDs are the processes in dir's cgroup and every cgroup below it.
func cgroupPIDs(dir string) []string {
	var pids []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err == nil {
			pids = append(pids, strings.Fields(string(data))...)
		}
		return nil
	})
	return pids
}

// treeRSS sums the resident memory of the processes of dir's cgroup tree.
func treeRSS(dir string) int64 {
	var sum int64
	for _, pid := range cgroupPIDs(dir) {
		sum += vmRSS(pid)
	}
	return sum
}

// cgroupStat is one figure of a cgroup v1 memory.stat, in bytes.
func cgroupStat(dir, key string) int64 {
	data, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// fleetdFigures are the resident memory and the open TCP connections of
// fleetd's container (controllers and gateway in one process).
type fleetdFigures struct {
	rss   int64
	conns peerCounts
	// opens counts the TCP connections opened in fleetd's Pod so far.
	opens tcpOpens
}

// tcpOpens are a network namespace's TCP connections opened so far: dialed
// (active) and accepted (passive), from /proc/PID/net/snmp. In fleetd's
// Pod, fleetd dials (the API server, and a connection to each pane host,
// which its calls share) and the gateway accepts (the members' forwarders,
// primaries, the kubelet's probes); the shared pane server beside it does
// neither.
type tcpOpens struct{ active, passive int64 }

func (o tcpOpens) minus(before tcpOpens) tcpOpens {
	return tcpOpens{o.active - before.active, o.passive - before.passive}
}

func readTCPOpens(pid string) tcpOpens {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "net", "snmp"))
	if err != nil {
		return tcpOpens{}
	}
	var names []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		var o tcpOpens
		for i := 1; i < len(f) && i < len(names); i++ {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			switch names[i] {
			case "ActiveOpens":
				o.active = n
			case "PassiveOpens":
				o.passive = n
			}
		}
		return o
	}
	return tcpOpens{}
}

// fleetd reads fleetd's figures, summed over its replicas: each one's
// processes are those of its fleetd container's cgroup, found by the
// container's id.
func (r *scaleRun) fleetd(b *testing.B) fleetdFigures {
	b.Helper()
	f := fleetdFigures{conns: peerCounts{}}
	for _, pids := range r.fleetdPIDs(b) {
		for _, pid := range pids {
			f.rss += vmRSS(pid)
		}
		for peer, n := range tcpPeers(pids) {
			f.conns[peer] += n
		}
		// Counted per Pod: each replica's network namespace.
		o := readTCPOpens(pids[0])
		f.opens.active += o.active
		f.opens.passive += o.passive
	}
	return f
}

// fleetdPIDs are the processes of each fleetd replica's fleetd container.
func (r *scaleRun) fleetdPIDs(b *testing.B) [][]string {
	b.Helper()
	pods, err := r.kube.CoreV1().Pods("fleetd-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=fleetd"})
	if err != nil {
		b.Fatal(err)
	}
	if len(pods.Items) == 0 {
		b.Fatal("no fleetd pods")
	}
	cgroups := podCgroups(b)
	var out [][]string
	for _, pod := range pods.Items {
		var id string
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == "fleetd" {
				_, id, _ = strings.Cut(cs.ContainerID, "://")
			}
		}
		dir, ok := cgroups[string(pod.UID)]
		if !ok || id == "" {
			b.Fatalf("fleetd's pod %s: container id %q, cgroup found %v", pod.Name, id, ok)
		}
		pids := cgroupPIDs(filepath.Join(dir, id))
		if len(pids) == 0 {
			b.Fatalf("no processes in fleetd's container cgroup %s", filepath.Join(dir, id))
		}
		out = append(out, pids)
	}
	return out
}

// fleetdSampler reads fleetd's figures every second, keeping the most.
type fleetdSampler struct {
	done chan struct{}
	wg   sync.WaitGroup
	most fleetdFigures
}

func (r *scaleRun) sampleFleetd(b *testing.B) *fleetdSampler {
	b.Helper()
	pids := r.fleetdPIDs(b)
	s := &fleetdSampler{done: make(chan struct{})}
	s.wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			var rss int64
			conns := peerCounts{}
			for _, replica := range pids {
				for _, pid := range replica {
					rss += vmRSS(pid)
				}
				for peer, n := range tcpPeers(replica) {
					conns[peer] += n
				}
			}
			s.most.rss = max(s.most.rss, rss)
			if conns.total() > s.most.conns.total() {
				s.most.conns = conns
			}
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
		}
	})
	return s
}

func (s *fleetdSampler) stop() fleetdFigures {
	close(s.done)
	s.wg.Wait()
	return s.most
}

// Peers of fleetd's TCP connections.
const (
	peerAPIServer = "api-server"
	peerPaneHost  = "pane-host"
	peerGateway   = "gateway-client"
	peerOther     = "other"
)

// peerCounts are established TCP connections by peer.
type peerCounts map[string]int

func (p peerCounts) total() int {
	n := 0
	for _, c := range p {
		n += c
	}
	return n
}

// The gateway's port in config/manager, and the API server's as a pod
// dials it: the kubernetes Service (the socket keeps the Service's
// address; kube-proxy's translation does not show in it).
const (
	gatewayPort    = 8080
	apiServicePort = 443
)

// tcpPeers counts the established TCP connections whose sockets pids hold:
// the socket inodes of their file descriptors, looked up in the tables of
// their network namespace (/proc/PID/net/tcp and tcp6, which list every
// socket of the Pod's namespace).
func tcpPeers(pids []string) peerCounts {
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, _ := os.ReadDir(filepath.Join("/proc", pid, "fd"))
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", pid, "fd", fd.Name()))
			if err != nil {
				continue
			}
			if inode, ok := strings.CutPrefix(link, "socket:["); ok {
				inodes[strings.TrimSuffix(inode, "]")] = true
			}
		}
	}
	counts := peerCounts{}
	if len(pids) == 0 {
		return counts
	}
	for _, table := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(filepath.Join("/proc", pids[0], "net", table))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			if len(f) < 10 || f[3] != "01" || !inodes[f[9]] {
				continue
			}
			counts[peerOf(hexPort(f[1]), hexPort(f[2]))]++
		}
	}
	return counts
}

func peerOf(local, remote int) string {
	switch {
	case local == gatewayPort:
		return peerGateway
	case remote == panehost.DefaultPort:
		return peerPaneHost
	case remote == apiServicePort:
		return peerAPIServer
	}
	return peerOther
}

// hexPort is the port of a /proc/net/tcp address, ADDR:PORT in hex.
func hexPort(addr string) int {
	_, port, _ := strings.Cut(addr, ":")
	n, _ := strconv.ParseInt(port, 16, 32)
	return int(n)
}

// writtenByDelegations are the resources whose writes a Delegation causes.
var writtenByDelegations = []string{"delegations", "members", "pods", "events"}

// requestKey is one series of apiserver_request_total.
type requestKey struct{ resource, subresource, verb, code string }

// requestCounts are the API server's requests, by series.
type requestCounts struct {
	counts map[requestKey]float64
	// delegations is how many Delegations the requests are for.
	delegations int
}

func (c requestCounts) minus(before requestCounts) requestCounts {
	out := requestCounts{counts: map[requestKey]float64{}}
	for k, v := range c.counts {
		if d := v - before.counts[k]; d != 0 {
			out.counts[k] = d
		}
	}
	return out
}

func (c requestCounts) sum(keep func(requestKey) bool) float64 {
	var n float64
	for k, v := range c.counts {
		if keep(k) {
			n += v
		}
	}
	return n
}

// per is the requests keep selects per Delegation.
func (c requestCounts) per(keep func(requestKey) bool) float64 {
	return c.sum(keep) / float64(c.delegations)
}

// The verbs of apiserver_request_total that write, and that read (WATCH
// is one request for as long as the watch lasts, so it is left out).
var (
	writeVerbs = []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}
	readVerbs  = []string{"GET", "LIST"}
)

// writesTo selects the writes to resources, their subresources included.
func writesTo(resources ...string) func(requestKey) bool {
	return func(k requestKey) bool {
		return slices.Contains(writeVerbs, k.verb) && slices.Contains(resources, k.resource)
	}
}

// statusWritesTo selects the writes to resource's status.
func statusWritesTo(resource string) func(requestKey) bool {
	return func(k requestKey) bool {
		return slices.Contains(writeVerbs, k.verb) && k.resource == resource && k.subresource == "status"
	}
}

// conflictsOn selects the writes to resources refused with a conflict.
func conflictsOn(resources ...string) func(requestKey) bool {
	return func(k requestKey) bool { return writesTo(resources...)(k) && k.code == "409" }
}

// readsOf selects the GETs and LISTs of resources.
func readsOf(resources ...string) func(requestKey) bool {
	return func(k requestKey) bool {
		return slices.Contains(readVerbs, k.verb) && slices.Contains(resources, k.resource)
	}
}

// reviews selects the TokenReviews and SubjectAccessReviews: the gateway
// asks them for the pods' calls.
func reviews(k requestKey) bool {
	return k.verb == "POST" && (k.resource == "tokenreviews" || k.resource == "subjectaccessreviews")
}

func (c requestCounts) String() string {
	keys := slices.SortedFunc(maps.Keys(c.counts), func(a, b requestKey) int {
		return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
	})
	var s strings.Builder
	for _, k := range keys {
		res := k.resource
		if k.subresource != "" {
			res += "/" + k.subresource
		}
		fmt.Fprintf(&s, "  %-28s %-6s %s  %6.0f  (%.3f/delegation)\n", res, k.verb, k.code, c.counts[k], c.counts[k]/float64(max(c.delegations, 1)))
	}
	return s.String()
}

// apiRequests reads the API server's apiserver_request_total.
func (r *scaleRun) apiRequests(b *testing.B) requestCounts {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data, err := r.kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatalf("reading the API server's metrics: %v", err)
	}
	return parseRequests(string(data))
}

var (
	requestTotal = regexp.MustCompile(`^apiserver_request_total\{(.*)\} (\S+)$`)
	metricLabel  = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)
)

// parseRequests reads apiserver_request_total from the Prometheus text
// format.
func parseRequests(text string) requestCounts {
	c := requestCounts{counts: map[requestKey]float64{}}
	for _, line := range strings.Split(text, "\n") {
		m := requestTotal.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range metricLabel.FindAllStringSubmatch(m[1], -1) {
			labels[l[1]] = l[2]
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			continue
		}
		c.counts[requestKey{labels["resource"], labels["subresource"], labels["verb"], labels["code"]}] += v
	}
	return c
}

// quiesce waits until the writes that Delegations cause have stopped for
// three seconds (at most a minute), and returns the counts then.
func (r *scaleRun) quiesce(b *testing.B) requestCounts {
	b.Helper()
	written := writesTo(writtenByDelegations...)
	last := r.apiRequests(b)
	still := 0
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && still < 3; {
		time.Sleep(time.Second)
		now := r.apiRequests(b)
		if now.sum(written) == last.sum(written) {
			still++
		} else {
			still = 0
		}
		last = now
	}
	return last
}

func TestParseRequests(t *testing.T) {
	text := `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="fleet.fleetd.dev",resource="delegations",scope="resource",subresource="",verb="POST",version="v1alpha1"} 1000
apiserver_request_total{code="200",component="apiserver",dry_run="",group="fleet.fleetd.dev",resource="delegations",scope="resource",subresource="status",verb="PUT",version="v1alpha1"} 2000
apiserver_request_total{code="409",component="apiserver",dry_run="",group="fleet.fleetd.dev",resource="members",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="authentication.k8s.io",resource="tokenreviews",scope="cluster",subresource="",verb="POST",version="v1"} 40
apiserver_request_duration_seconds_bucket{component="apiserver",resource="delegations",verb="POST",le="0.1"} 999
`
	c := parseRequests(text)
	c.delegations = 1000
	cases := map[string]struct {
		keep func(requestKey) bool
		want float64
	}{
		"writes to delegations":     {keep: writesTo("delegations"), want: 3},
		"status writes to members":  {keep: statusWritesTo("members"), want: 0.007},
		"conflicts":                 {keep: conflictsOn(writtenByDelegations...), want: 0.007},
		"reads":                     {keep: readsOf(writtenByDelegations...), want: 0.003},
		"reviews":                   {keep: reviews, want: 0.04},
		"writes to pods and events": {keep: writesTo("pods", "events"), want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := c.per(tc.keep); got != tc.want {
				t.Errorf("per delegation = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPeerOf(t *testing.T) {
	cases := map[string]struct {
		local, remote string
		want          string
	}{
		"a pane host":      {local: "0B01F40A:A3C2", remote: "0C02F40A:1D13", want: peerPaneHost},
		"the API server":   {local: "0B01F40A:B0C4", remote: "0100600A:01BB", want: peerAPIServer},
		"a gateway client": {local: "0B01F40A:1F90", remote: "0C02F40A:D431", want: peerGateway},
		"anything else":    {local: "0B01F40A:C350", remote: "0A00600A:0035", want: peerOther},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := peerOf(hexPort(tc.local), hexPort(tc.remote)); got != tc.want {
				t.Errorf("peerOf(%s, %s) = %s, want %s", tc.local, tc.remote, got, tc.want)
			}
		})
	}
}
