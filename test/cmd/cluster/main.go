// Command cluster runs the local multi-node Kubernetes cluster of package
// localcluster: `make cluster` and `make cluster-down` call it. From the
// repository's root:
//
//	go -C test run ./cmd/cluster up [--nodes=3] [--port=26443]  start it, or reuse the running one
//	go -C test run ./cmd/cluster down                           stop it and undo every change to the machine
//	go -C test run ./cmd/cluster status                         its daemons, nodes and kubeconfig
//	go -C test run ./cmd/cluster node-kill NODE                 kill a node as a power loss would
//	go -C test run ./cmd/cluster node-start NODE                boot a killed node again
//	go -C test run ./cmd/cluster load ARCHIVE...                import OCI archives into every node
//
// The state lives in .cluster/ (--state, CLUSTER_STATE); --name
// (CLUSTER_NAME, default fleetd-cluster) names its network namespace and
// cgroups, so a second cluster with its own state, name and port can run
// beside it. Everything needs root.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetd/fleetd/test/framework/localcluster"
	"github.com/fleetd/fleetd/test/framework/ociimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: cluster up, down, status, node-kill NODE, node-start NODE or load ARCHIVE")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := ociimage.FindRoot(cwd)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	state := fs.String("state", envOr("CLUSTER_STATE", filepath.Join(root, ".cluster")), "the cluster's state directory")
	nodes := fs.Int("nodes", envInt("NODES", localcluster.DefaultNodes), "how many nodes (kubelet + containerd each)")
	port := fs.Int("port", envInt("CLUSTER_PORT", localcluster.DefaultPort), "the API server's port on 127.0.0.1")
	name := fs.String("name", envOr("CLUSTER_NAME", localcluster.DefaultName), "names the network namespace and the cgroups")
	binDir := fs.String("bin", envOr("CONTROLPLANE_BIN", filepath.Join(root, "bin", "controlplane")), "the Kubernetes binaries")
	images := fs.String("images", filepath.Join(root, "bin", "images"), "where the image archives are built")
	netns := fs.String("netns", "", "relay: the network namespace file to reach into")
	listen := fs.String("listen", "", "relay: the address to listen on")
	target := fs.String("target", "", "relay: the address inside the namespace")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	switch args[0] {
	case "up":
		// Before anything is built as the wrong user.
		if err := localcluster.CheckRoot(); err != nil {
			return err
		}
		infra, err := infraImages(ctx, root, *images, *binDir)
		if err != nil {
			return err
		}
		relay, err := installSelf(*state)
		if err != nil {
			return err
		}
		start := time.Now()
		cl, err := localcluster.Up(ctx, localcluster.Config{StateDir: *state, BinDir: *binDir, Nodes: *nodes, Port: *port, Name: *name},
			localcluster.Options{Out: os.Stdout, RelayCommand: []string{relay, "relay"}, Images: infra})
		if err != nil {
			return err
		}
		fmt.Printf("Cluster up in %.1fs: nodes %s\n  export KUBECONFIG=%s\n", time.Since(start).Seconds(), strings.Join(cl.NodeNames(), ", "), cl.Kubeconfig())
		return nil
	case "down":
		return localcluster.Down(ctx, *state, os.Stdout)
	case "status":
		return status(ctx, *state, os.Stdout)
	case "node-kill", "node-start":
		if fs.NArg() != 1 {
			return usage()
		}
		cl, err := localcluster.Load(*state)
		if err != nil {
			return err
		}
		if args[0] == "node-kill" {
			return cl.KillNode(fs.Arg(0))
		}
		return cl.StartNode(ctx, fs.Arg(0))
	case "load":
		cl, err := localcluster.Load(*state)
		if err != nil {
			return err
		}
		for _, a := range fs.Args() {
			start := time.Now()
			if err := cl.Import(ctx, localcluster.Image{Archive: a}); err != nil {
				return err
			}
			fmt.Printf("Loaded %s into %d nodes in %.1fs\n", filepath.Base(a), len(cl.Nodes), time.Since(start).Seconds())
		}
		return nil
	case "relay":
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return err
		}
		return localcluster.Relay(ctx, ln, *netns, *target)
	}
	return usage()
}

// infraImages builds, when missing or older than their inputs, the images
// every node needs before its first pod: the sandbox and CoreDNS.
func infraImages(ctx context.Context, root, dir, binDir string) ([]localcluster.Image, error) {
	b, err := ociimage.NewBuilder(root, dir)
	if err != nil {
		return nil, err
	}
	coredns := filepath.Join(binDir, "coredns")
	if stale(b.Archive("pause"), filepath.Join(root, "hack", "pause", "main.go")) {
		if _, err := b.Pause(ctx); err != nil {
			return nil, err
		}
	}
	if stale(b.Archive("coredns"), coredns) {
		if _, err := b.CoreDNS(coredns); err != nil {
			return nil, err
		}
	}
	return []localcluster.Image{
		{Archive: b.Archive("pause"), Ref: ociimage.PauseRef, Pinned: true},
		{Archive: b.Archive("coredns"), Ref: ociimage.CoreDNSRef},
	}, nil
}

func stale(out, in string) bool {
	o, err := os.Stat(out)
	if err != nil {
		return true
	}
	i, err := os.Stat(in)
	return err != nil || i.ModTime().After(o.ModTime())
}

// installSelf copies this program into the state directory: the relay runs
// from there and outlives `go run`, whose build it would otherwise lose.
func installSelf(state string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	dst := filepath.Join(state, "bin", "cluster")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	in, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp := dst + ".new"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", err
	}
	if err := out.Close(); err != nil {
		return "", err
	}
	return dst, os.Rename(tmp, dst)
}

func status(ctx context.Context, state string, w io.Writer) error {
	cl, err := localcluster.Load(state)
	if err != nil {
		return err
	}
	procs, err := cl.Processes()
	if err != nil {
		return err
	}
	for _, p := range procs {
		s := "running"
		if !p.Running {
			s = "NOT RUNNING"
		}
		fmt.Fprintf(w, "%-28s pid %-8d %s\n", p.Name, p.PID, s)
	}
	for _, n := range cl.NodeNames() {
		ready, err := cl.NodeReady(ctx, n)
		switch {
		case err != nil:
			fmt.Fprintf(w, "node %-23s %v\n", n, err)
		case ready:
			fmt.Fprintf(w, "node %-23s Ready\n", n)
		default:
			fmt.Fprintf(w, "node %-23s NotReady\n", n)
		}
	}
	fmt.Fprintf(w, "KUBECONFIG=%s\n", cl.Kubeconfig())
	return cl.Healthy(ctx)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return v
	}
	return def
}
