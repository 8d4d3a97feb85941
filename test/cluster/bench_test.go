package cluster

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetd/fleetd/internal/testenv"
)

// readyAt is the up output's line for all nodes Ready, with the seconds
// since the bring-up began.
var readyAt = regexp.MustCompile(`(?m)^\s*([0-9.]+)s\s+\d+ nodes Ready`)

// upTimed tears the test cluster down, brings it up with the infra
// images in imagesDir, and returns the seconds to all nodes Ready and to
// the whole bring-up's end (cluster DNS serving).
func upTimed(b *testing.B, imagesDir string) (ready, total float64) {
	b.Helper()
	down(b)
	start := time.Now()
	out, err := clusterCmd("up", "--images="+imagesDir)
	if err != nil {
		b.Fatalf("cluster up: %v\n%s", err, out)
	}
	total = time.Since(start).Seconds()
	m := readyAt.FindStringSubmatch(out)
	if m == nil {
		b.Fatalf("no Ready line in:\n%s", out)
	}
	ready, _ = strconv.ParseFloat(m[1], 64)
	return ready, total
}

// BenchmarkClusterUp measures a cold bring-up (the pause and CoreDNS
// images not built yet) and a warm one (the same again after down), to
// every node Ready and to the end, and the cluster's memory once up.
// Timing belongs here, not in a test: make bench-cluster runs it once.
func BenchmarkClusterUp(b *testing.B) {
	requireCluster(b)
	images := b.TempDir()
	for b.Loop() {
		coldReady, coldTotal := upTimed(b, images)
		warmReady, warmTotal := upTimed(b, images)
		b.ReportMetric(coldReady, "s-cold-ready")
		b.ReportMetric(coldTotal, "s-cold-total")
		b.ReportMetric(warmReady, "s-warm-ready")
		b.ReportMetric(warmTotal, "s-warm-total")
		b.ReportMetric(float64(clusterRSS(b))/(1<<20), "MiB-rss")
	}
}

// clusterRSS sums the resident memory of every process in the test
// cluster's memory cgroups: daemons, shims and pods.
func clusterRSS(tb testing.TB) int64 {
	tb.Helper()
	var sum int64
	root := filepath.Join("/sys/fs/cgroup/memory", testName)
	seen := map[string]bool{}
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, pid := range strings.Fields(string(data)) {
			if seen[pid] {
				continue
			}
			seen[pid] = true
			sum += vmRSS(pid)
		}
		return nil
	})
	return sum
}

func vmRSS(pid string) int64 {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkImages builds fleetd's and the worker's images twice from one
// snapshot of the committed tree (git archive HEAD: the working tree may
// change between two builds while others edit it), the Debian root
// filesystems cached as after a first make images, and reports the time
// and archive size of each; the second build must give the same digests.
func BenchmarkImages(b *testing.B) {
	requireCluster(b)
	repo := testenv.RepoRoot()
	snap, out := b.TempDir(), b.TempDir()
	archive := filepath.Join(b.TempDir(), "tree.tar")
	for _, args := range [][]string{{"git", "-C", repo, "archive", "-o", archive, "HEAD"}, {"tar", "-xf", archive, "-C", snap}} {
		if msg, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			b.Fatalf("%v: %v: %s", args, err, msg)
		}
	}
	if err := os.MkdirAll(filepath.Join(repo, "bin", "images", "debian"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(repo, "bin", "images", "debian"), filepath.Join(out, "debian")); err != nil {
		b.Fatal(err)
	}
	build := func() map[string][2]string {
		cmd := exec.Command("go", "run", "./cmd/images", "--only=fleetd,worker", "--out="+out, "--bin="+filepath.Join(repo, "bin"))
		cmd.Dir = filepath.Join(snap, "test")
		msg, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("test/cmd/images: %v\n%s", err, msg)
		}
		got := map[string][2]string{}
		for _, line := range strings.Split(string(msg), "\n") {
			f := strings.Fields(line)
			if len(f) >= 5 && (f[0] == "fleetd" || f[0] == "worker") {
				got[f[0]] = [2]string{f[1], f[4]}
			}
		}
		return got
	}
	for b.Loop() {
		first := build()
		start := time.Now()
		second := build()
		b.ReportMetric(time.Since(start).Seconds(), "s-build-both")
		for _, name := range []string{"fleetd", "worker"} {
			if first[name][0] != second[name][0] {
				b.Errorf("%s: digest %s, then %s: not reproducible", name, first[name][0], second[name][0])
			}
			fi, err := os.Stat(filepath.Join(out, name+".tar"))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(fi.Size())/(1<<20), fmt.Sprintf("MiB-%s", name))
			secs, _ := strconv.ParseFloat(strings.TrimSuffix(second[name][1], "s"), 64)
			b.ReportMetric(secs, "s-"+name)
		}
	}
}
