package ociimage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The images the project builds, by the names pods and containerd use.
// config/manager names fleetd:dev, which resolves to FleetdRef, as on a
// kind node that `kind load docker-image fleetd:dev` filled.
const (
	FleetdRef  = "docker.io/library/fleetd:dev"
	WorkerRef  = "docker.io/library/fleetd-worker:dev"
	PauseRef   = "localhost/fleetd/pause:dev"
	CoreDNSRef = "localhost/fleetd/coredns:dev"
)

// Unprivileged users of the images: the agent user of fleetd's images
// (as the Dockerfile makes it), and the pause container's.
const (
	AgentUID = 65532
	pauseUID = 65535
)

// Builder builds images from the repository at Root into Dir (the archives,
// and layer tars and binaries on the way).
type Builder struct {
	Root  string
	Dir   string
	Epoch time.Time
	// Arch is the architecture binaries are built for and images say.
	Arch string
}

// NewBuilder builds into dir from the repository at root.
func NewBuilder(root, dir string) (*Builder, error) {
	epoch, err := Epoch()
	if err != nil {
		return nil, err
	}
	return &Builder{Root: root, Dir: dir, Epoch: epoch, Arch: runtime.GOARCH}, nil
}

// FindRoot is the fleetd checkout that holds dir: the nearest directory
// at or above dir whose go.mod is the module github.com/fleetd/fleetd (the
// product's, not the test module's), where the images are built from.
func FindRoot(dir string) (string, error) {
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(data), "module github.com/fleetd/fleetd\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run this inside the fleetd repository")
		}
		dir = parent
	}
}

// Archive is where the image named ref is written.
func (b *Builder) Archive(name string) string { return filepath.Join(b.Dir, name+".tar") }

// goBuildFlags are the flags of every go build of fleetd's programs, here
// and in the Dockerfile.
var goBuildFlags = []string{"-trimpath", "-buildvcs=false"}

// goBuild builds a static binary of pkg (a path in the repository) into
// Dir/bin: no cgo, no paths of this machine, no VCS stamp, so the same
// tree gives the same bytes here or in a Docker build.
func (b *Builder) goBuild(ctx context.Context, pkg, name string) (string, error) {
	out := filepath.Join(b.Dir, "bin", name)
	args := append(append([]string{"build"}, goBuildFlags...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = b.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+b.Arch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w: %s", pkg, err, strings.TrimSpace(string(msg)))
	}
	return out, nil
}

// write builds s and writes its archive as Dir/<name>.tar, returning the
// image's digest.
func (b *Builder) write(name string, s Spec) (v1.Hash, error) {
	img, err := Build(s, b.Arch, b.Epoch)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := WriteArchive(b.Archive(name), s.Ref, img); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

// Pause builds the sandbox image: the pause program of hack/pause alone.
func (b *Builder) Pause(ctx context.Context) (v1.Hash, error) {
	bin, err := b.goBuild(ctx, "./hack/pause", "pause")
	if err != nil {
		return v1.Hash{}, err
	}
	layer, err := LayerFromFiles(b.layerDir(), "pause", []File{{Path: "/pause", Source: bin, Mode: 0o755}}, b.Epoch)
	if err != nil {
		return v1.Hash{}, err
	}
	return b.write("pause", Spec{
		Ref:    PauseRef,
		Layers: []v1.Layer{layer},
		Config: v1.Config{Entrypoint: []string{"/pause"}, User: fmt.Sprintf("%d:%d", pauseUID, pauseUID)},
	})
}

// CoreDNS builds the cluster DNS image from the coredns binary that
// hack/controlplane.sh coredns built (static, from hack/coredns).
func (b *Builder) CoreDNS(corednsBinary string) (v1.Hash, error) {
	if _, err := os.Stat(corednsBinary); err != nil {
		return v1.Hash{}, fmt.Errorf("no CoreDNS binary (hack/controlplane.sh coredns builds it): %w", err)
	}
	layer, err := LayerFromFiles(b.layerDir(), "coredns", []File{
		{Path: "/coredns", Source: corednsBinary, Mode: 0o755},
		{Path: "/etc/coredns", Mode: fs.ModeDir | 0o755},
	}, b.Epoch)
	if err != nil {
		return v1.Hash{}, err
	}
	return b.write("coredns", Spec{
		Ref:    CoreDNSRef,
		Layers: []v1.Layer{layer},
		Config: v1.Config{
			Entrypoint:   []string{"/coredns"},
			User:         fmt.Sprintf("%d:%d", AgentUID, AgentUID),
			ExposedPorts: map[string]struct{}{"53/udp": {}, "53/tcp": {}},
		},
	})
}

func (b *Builder) layerDir() string { return filepath.Join(b.Dir, "layers") }

// Program is one of fleetd's own programs as its images hold it.
type Program struct {
	// Package is the Go package built, as a path in the repository.
	Package string
	// Name is the binary's name while it is built.
	Name string
	// Path is where the images hold it.
	Path string
}

// FleetdPrograms are fleetd's own programs, where the Dockerfile puts
// them: the controller and gateway, the pane server, and the scripted
// test agent on PATH. The fleetd and worker images share them.
var FleetdPrograms = []Program{
	{Package: "./cmd/fleetd", Name: "fleetd", Path: "/fleetd"},
	{Package: "./cmd/paneserver", Name: "paneserver", Path: "/paneserver"},
	{Package: "./hack/scriptedagent", Name: "scripted-agent", Path: "/usr/local/bin/scripted-agent"},
}

// fleetdBinaries is the layer of FleetdPrograms.
func (b *Builder) fleetdBinaries(ctx context.Context) (v1.Layer, error) {
	var files []File
	for _, p := range FleetdPrograms {
		bin, err := b.goBuild(ctx, p.Package, p.Name)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: p.Path, Source: bin, Mode: 0o755})
	}
	return LayerFromFiles(b.layerDir(), "fleetd-binaries", files, b.Epoch)
}

// baseAndBinaries are the bottom and top layers of fleetd's two images:
// the Debian base (and its tar, which the worker's packages are a diff
// against) and fleetd's binaries.
func (b *Builder) baseAndBinaries(ctx context.Context, out io.Writer) (string, v1.Layer, v1.Layer, error) {
	tarPath, err := b.Rootfs(ctx, DebianBase, out)
	if err != nil {
		return "", nil, nil, err
	}
	base, err := LayerFromTar(tarPath)
	if err != nil {
		return "", nil, nil, err
	}
	bins, err := b.fleetdBinaries(ctx)
	return tarPath, base, bins, err
}

// agentConfig is the config of fleetd's images: the agent user, its home,
// a PATH with the scripted agent.
func agentConfig() v1.Config {
	return v1.Config{
		User:       fmt.Sprintf("%d:%d", AgentUID, AgentUID),
		WorkingDir: "/home/agent",
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/agent"},
	}
}

// fleetdConfig is the config of fleetd's image: it runs fleetd.
func fleetdConfig() v1.Config {
	cfg := agentConfig()
	cfg.Entrypoint = []string{"/fleetd"}
	return cfg
}

// workerConfig is the config of the worker image: a shell unless the pod
// says what to run.
func workerConfig() v1.Config {
	cfg := agentConfig()
	cfg.Cmd = []string{"/bin/sh"}
	return cfg
}

// Fleetd builds fleetd's image: the Debian base and fleetd's binaries.
func (b *Builder) Fleetd(ctx context.Context, out io.Writer) (v1.Hash, error) {
	_, base, bins, err := b.baseAndBinaries(ctx, out)
	if err != nil {
		return v1.Hash{}, err
	}
	return b.write("fleetd", Spec{Ref: FleetdRef, Layers: []v1.Layer{base, bins}, Config: fleetdConfig()})
}

// Worker builds the worker image: the same Debian base, node and git on
// it, the pinned agent CLIs that hack/agents.sh installed into agentsDir
// (bin/agents), and fleetd's binaries, so that a member's pod runs the pane
// host and the agent from one image.
func (b *Builder) Worker(ctx context.Context, agentsDir string, out io.Writer) (v1.Hash, error) {
	baseTar, base, bins, err := b.baseAndBinaries(ctx, out)
	if err != nil {
		return v1.Hash{}, err
	}
	fullTar, err := b.Rootfs(ctx, DebianWorker, out)
	if err != nil {
		return v1.Hash{}, err
	}
	diffTar := filepath.Join(b.layerDir(), "worker-packages.tar")
	if err := os.MkdirAll(b.layerDir(), 0o755); err != nil {
		return v1.Hash{}, err
	}
	if err := DiffRootfs(baseTar, fullTar, diffTar, b.Epoch); err != nil {
		return v1.Hash{}, err
	}
	pkgs, err := LayerFromTar(diffTar)
	if err != nil {
		return v1.Hash{}, err
	}
	if _, err := os.Stat(filepath.Join(agentsDir, "node_modules")); err != nil {
		return v1.Hash{}, fmt.Errorf("no agent CLIs in %s (make agents installs them): %w", agentsDir, err)
	}
	agentFiles, err := TreeFiles(agentsDir, agentsPath, 0, 0)
	if err != nil {
		return v1.Hash{}, err
	}
	for _, cli := range agentCLIs {
		agentFiles = append(agentFiles, File{Path: "/usr/local/bin/" + cli, Mode: fs.ModeSymlink | 0o777, Link: agentsPath + "/node_modules/.bin/" + cli})
	}
	agents, err := LayerFromFiles(b.layerDir(), "agents", agentFiles, b.Epoch)
	if err != nil {
		return v1.Hash{}, err
	}
	return b.write("worker", Spec{Ref: WorkerRef, Layers: []v1.Layer{base, pkgs, agents, bins}, Config: workerConfig()})
}

// agentsPath is where the worker image holds the agent CLIs' npm tree.
const agentsPath = "/opt/fleetd/agents"

// agentCLIs are the agent CLIs the worker image puts on PATH, in
// /usr/local/bin, as links into the npm tree's .bin.
var agentCLIs = []string{"claude", "codex"}
