// Command images builds fleetd's images without Docker, reproducibly, as
// OCI archives in bin/images, and with --load imports them into every node
// of the running local cluster (make cluster):
//
//	fleetd.tar   docker.io/library/fleetd:dev         controller, gateway, pane server, scripted agent
//	worker.tar   docker.io/library/fleetd-worker:dev  the pinned Claude Code and Codex CLIs, node, git, fleetd's binaries
//	pause.tar    localhost/fleetd/pause:dev           the pods' sandbox
//	coredns.tar  localhost/fleetd/coredns:dev         cluster DNS
//
// The Debian root filesystem under fleetd and the worker is made once with
// mmdebstrap and cached in bin/images/debian.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/fleetd/fleetd/test/framework/localcluster"
	"github.com/fleetd/fleetd/test/framework/ociimage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run() error {
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := ociimage.FindRoot(cwd)
	if err != nil {
		return err
	}
	out := flag.String("out", filepath.Join(root, "bin", "images"), "where the archives go")
	only := flag.String("only", "fleetd,worker,pause,coredns", "which images, comma-separated")
	load := flag.Bool("load", false, "import them into every node of the local cluster, if it runs")
	state := flag.String("state", filepath.Join(root, ".cluster"), "the local cluster's state directory")
	binDir := flag.String("bin", filepath.Join(root, "bin"), "where bin/controlplane/coredns and bin/agents are")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	b, err := ociimage.NewBuilder(root, *out)
	if err != nil {
		return err
	}
	builds := map[string]func() (v1.Hash, error){
		"fleetd":  func() (v1.Hash, error) { return b.Fleetd(ctx, os.Stderr) },
		"worker":  func() (v1.Hash, error) { return b.Worker(ctx, filepath.Join(*binDir, "agents"), os.Stderr) },
		"pause":   func() (v1.Hash, error) { return b.Pause(ctx) },
		"coredns": func() (v1.Hash, error) { return b.CoreDNS(filepath.Join(*binDir, "controlplane", "coredns")) },
	}
	names := strings.Split(*only, ",")
	for _, name := range names {
		build, ok := builds[name]
		if !ok {
			return fmt.Errorf("no image %q (there are fleetd, worker, pause, coredns)", name)
		}
		start := time.Now()
		digest, err := build()
		if err != nil {
			return fmt.Errorf("building %s: %w", name, err)
		}
		fi, err := os.Stat(b.Archive(name))
		if err != nil {
			return err
		}
		fmt.Printf("%-8s %s  %6.1f MiB  %5.1fs  %s\n", name, digest, float64(fi.Size())/(1<<20), time.Since(start).Seconds(), b.Archive(name))
	}
	if !*load {
		return nil
	}
	cl, err := localcluster.Load(*state)
	if errors.Is(err, localcluster.ErrNoCluster) {
		fmt.Println("No local cluster runs: `make cluster` starts one and loads pause and CoreDNS; then `make images` again.")
		return nil
	}
	if err != nil {
		return err
	}
	if err := cl.Healthy(ctx); err != nil {
		fmt.Printf("The local cluster is not healthy (%v); not loading.\n", err)
		return nil
	}
	for _, name := range names {
		start := time.Now()
		if err := cl.Import(ctx, localcluster.Image{Archive: b.Archive(name), Ref: ociimage.PauseRef, Pinned: name == "pause"}); err != nil {
			return err
		}
		fmt.Printf("Loaded %s into %d nodes in %.1fs\n", name, len(cl.Nodes), time.Since(start).Seconds())
	}
	return nil
}
