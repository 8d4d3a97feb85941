package ociimage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The Dockerfile and `make images` are two recipes for one pair of
// images. These tests read the Dockerfile and hold it to the packages its
// binaries import and to the recipes in recipes.go, so that `docker build`
// builds, and builds what `make images` builds, with no Docker here.

// goBuildStep is one `go build` in the Dockerfile's RUNs.
type goBuildStep struct {
	Stage   string
	Line    int
	Package string
	Out     string
	Flags   []string
	// Dir is the WORKDIR it runs in.
	Dir string
	// Env is what the RUN exports for it.
	Env map[string]string
	// Copied maps each path of the build context that the stage copied
	// before the step to where it copied it.
	Copied map[string]string
}

// dockerImage is what a stage of the Dockerfile, or a recipe, puts in an
// image, in the terms the two share.
type dockerImage struct {
	// Programs maps where each of fleetd's programs is to its package.
	Programs map[string]string
	// Packages are the Debian packages installed on the base.
	Packages []string
	// Symlinks maps each link made to its target.
	Symlinks map[string]string
	// Trees are the directories copied whole from another stage or the
	// context.
	Trees  []string
	Config v1.Config
}

// dockerfileModel is what the Dockerfile says: its go builds, and the
// image each stage makes.
type dockerfileModel struct {
	Builds []goBuildStep
	Images map[string]*dockerImage
	// Default is the stage `docker build` builds with no --target.
	Default string
}

// readDockerfile interprets stages: it follows each stage from its base
// (a stage before it, or an image from a registry, taken as empty).
func readDockerfile(stages []dockerStage) (*dockerfileModel, error) {
	m := &dockerfileModel{Images: map[string]*dockerImage{}, Default: stages[len(stages)-1].Name}
	workdirs := map[string]string{}
	copies := map[string]map[string]string{}
	for _, s := range stages {
		img := &dockerImage{Programs: map[string]string{}, Symlinks: map[string]string{}}
		copied := map[string]string{}
		dir := "/"
		if base, ok := m.Images[s.From]; ok {
			img = cloneImage(base)
			dir = workdirs[s.From]
			for k, v := range copies[s.From] {
				copied[k] = v
			}
		}
		cmdSet := false
		for _, in := range s.Instructions {
			switch in.Cmd {
			case "WORKDIR":
				if len(in.Args) != 1 {
					return nil, fmt.Errorf("line %d: WORKDIR takes one path", in.Line)
				}
				dir = path.Join(dir, in.Args[0])
				if path.IsAbs(in.Args[0]) {
					dir = path.Clean(in.Args[0])
				}
				img.Config.WorkingDir = dir
			case "USER":
				if len(in.Args) != 1 {
					return nil, fmt.Errorf("line %d: USER takes one user", in.Line)
				}
				img.Config.User = in.Args[0]
			case "ENV":
				pairs, err := envPairs(in)
				if err != nil {
					return nil, err
				}
				for _, kv := range pairs {
					img.Config.Env = slices.DeleteFunc(img.Config.Env, func(e string) bool { return strings.HasPrefix(e, kv[0]+"=") })
					img.Config.Env = append(img.Config.Env, kv[0]+"="+kv[1])
				}
			case "ENTRYPOINT":
				img.Config.Entrypoint = execForm(in)
				if !cmdSet {
					// An ENTRYPOINT drops the CMD the base image had.
					img.Config.Cmd = nil
				}
			case "CMD":
				img.Config.Cmd = execForm(in)
				cmdSet = true
			case "COPY", "ADD":
				if len(in.Args) < 2 {
					return nil, fmt.Errorf("line %d: %s takes sources and a destination", in.Line, in.Cmd)
				}
				srcs, dest := in.Args[:len(in.Args)-1], in.Args[len(in.Args)-1]
				from, fromStage := in.Flags["from"]
				for _, src := range srcs {
					to := dest
					if !path.IsAbs(to) {
						to = path.Join(dir, to)
					}
					if strings.HasSuffix(dest, "/") && !strings.HasSuffix(src, "/") && (len(srcs) > 1 || !fromStage) && !isContextDir(src) {
						to = path.Join(to, path.Base(src))
					}
					if fromStage {
						if b, ok := findBuild(m.Builds, from, src); ok {
							img.Programs[to] = b.Package
						} else {
							img.Trees = append(img.Trees, to)
						}
						continue
					}
					copied[path.Clean(src)] = path.Clean(to)
					img.Trees = append(img.Trees, to)
				}
			case "RUN":
				env := map[string]string{}
				for _, c := range shellCommands(in.Args) {
					switch {
					case c[0] == "export":
						for _, kv := range c[1:] {
							k, v, _ := strings.Cut(kv, "=")
							env[k] = v
						}
					case c[0] == "go" && len(c) > 1 && c[1] == "build":
						b := goBuildStep{Stage: s.Name, Line: in.Line, Dir: dir, Env: env, Copied: maps(copied)}
						for i := 2; i < len(c); i++ {
							switch {
							case c[i] == "-o" && i+1 < len(c):
								b.Out = c[i+1]
								i++
							case strings.HasPrefix(c[i], "-"):
								b.Flags = append(b.Flags, c[i])
							default:
								b.Package = c[i]
							}
						}
						m.Builds = append(m.Builds, b)
					case c[0] == "apt-get" && slices.Contains(c, "install"):
						for _, w := range c[slices.Index(c, "install")+1:] {
							if !strings.HasPrefix(w, "-") {
								img.Packages = append(img.Packages, w)
							}
						}
					case c[0] == "ln" && len(c) == 4 && c[1] == "-s":
						img.Symlinks[c[3]] = c[2]
					}
				}
			}
		}
		sort.Strings(img.Packages)
		m.Images[s.Name] = img
		workdirs[s.Name] = dir
		copies[s.Name] = copied
	}
	return m, nil
}

// isContextDir says whether src names a directory of the build context
// (so COPY puts its contents, not itself, at the destination).
func isContextDir(src string) bool {
	fi, err := os.Stat(filepath.Join(repoRoot(), filepath.FromSlash(src)))
	return err == nil && fi.IsDir()
}

func execForm(in dockerInstruction) []string {
	if in.JSON {
		return in.Args
	}
	return []string{"/bin/sh", "-c", in.Raw}
}

func findBuild(builds []goBuildStep, stage, out string) (goBuildStep, bool) {
	for _, b := range builds {
		if b.Stage == stage && b.Out == out {
			return b, true
		}
	}
	return goBuildStep{}, false
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneImage(img *dockerImage) *dockerImage {
	c := *img
	c.Programs = maps(img.Programs)
	c.Symlinks = maps(img.Symlinks)
	c.Packages = slices.Clone(img.Packages)
	c.Trees = slices.Clone(img.Trees)
	c.Config.Env = slices.Clone(img.Config.Env)
	return &c
}

// recipeImages are what `make images` puts in fleetd's two images, read
// from the recipes themselves.
func recipeImages() map[string]*dockerImage {
	programs := map[string]string{}
	for _, p := range FleetdPrograms {
		programs[p.Path] = p.Package
	}
	links := map[string]string{}
	for _, cli := range agentCLIs {
		links["/usr/local/bin/"+cli] = agentsPath + "/node_modules/.bin/" + cli
	}
	sorted := func(s []string) []string { s = slices.Clone(s); sort.Strings(s); return s }
	return map[string]*dockerImage{
		"fleetd": {Programs: programs, Packages: sorted(DebianBase.Include), Symlinks: map[string]string{}, Config: fleetdConfig()},
		"worker": {Programs: programs, Packages: sorted(DebianWorker.Include), Symlinks: links, Trees: []string{agentsPath}, Config: workerConfig()},
	}
}

// goPackage is what `go list -deps` says of one package.
type goPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	EmbedFiles []string
	Module     *struct{ Main bool }
}

var (
	goListMu    sync.Mutex
	goListCache = map[string][]goPackage{}
)

// goListDeps lists pkgs and every package they import, for the image's
// platform, once per set of packages.
func goListDeps(t *testing.T, pkgs []string) []goPackage {
	t.Helper()
	key := strings.Join(pkgs, " ")
	goListMu.Lock()
	defer goListMu.Unlock()
	if deps, ok := goListCache[key]; ok {
		return deps
	}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Dir,Standard,EmbedFiles,Module"}, pkgs...)...)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v: %s", key, err, stderr.String())
	}
	var deps []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		deps = append(deps, p)
	}
	goListCache[key] = deps
	return deps
}

func repoRoot() string { return filepath.Join("..", "..", "..") }

// dockerignored says whether the build context leaves out rel, by the
// .dockerignore patterns: a path is left out when it or a directory
// above it matches, the last matching pattern deciding.
func dockerignored(patterns []string, rel string) bool {
	out := false
	for _, p := range patterns {
		keep := strings.HasPrefix(p, "!")
		p = path.Clean(strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/"))
		parts := strings.Split(rel, "/")
		for i := range parts {
			if ok, _ := path.Match(p, strings.Join(parts[:i+1], "/")); ok {
				out = !keep
				break
			}
		}
	}
	return out
}

func readDockerignore(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// dockerfileProblems lists every way the Dockerfile (with its
// .dockerignore) fails to build fleetd's programs from the packages they
// import, or puts something other than what the recipes put in an image.
func dockerfileProblems(t *testing.T, dockerfile, dockerignore string) []string {
	t.Helper()
	stages, err := parseDockerfile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	m, err := readDockerfile(stages)
	if err != nil {
		t.Fatal(err)
	}
	ignore := readDockerignore(dockerignore)
	var problems []string
	// inTree says whether the build context path rel is in the build's
	// tree where the go build in dir expects it.
	inTree := func(b goBuildStep, rel string) error {
		if dockerignored(ignore, rel) {
			return fmt.Errorf(".dockerignore leaves out %s", rel)
		}
		for src, to := range b.Copied {
			if src == "." || rel == src || strings.HasPrefix(rel, src+"/") {
				if want := path.Join(b.Dir, rel); path.Join(to, strings.TrimPrefix(rel, src)) != want {
					return fmt.Errorf("%s is copied to %s, not %s", rel, path.Join(to, strings.TrimPrefix(rel, src)), want)
				}
				return nil
			}
		}
		return fmt.Errorf("no COPY before line %d copies %s", b.Line, rel)
	}
	root, err := filepath.Abs(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range m.Builds {
		for _, f := range []string{"go.mod", "go.sum"} {
			if err := inTree(b, f); err != nil {
				problems = append(problems, fmt.Sprintf("go build %s: %v", b.Package, err))
			}
		}
		if !slices.Equal(b.Flags, goBuildFlags) || b.Env["CGO_ENABLED"] != "0" {
			problems = append(problems, fmt.Sprintf("go build %s: flags %q and CGO_ENABLED=%q, want %q and 0 as make images builds it", b.Package, b.Flags, b.Env["CGO_ENABLED"], goBuildFlags))
		}
		for _, p := range goListDeps(t, []string{b.Package}) {
			if p.Standard || p.Module == nil || !p.Module.Main {
				continue
			}
			rel, err := filepath.Rel(root, p.Dir)
			if err != nil {
				t.Fatal(err)
			}
			need := []string{filepath.ToSlash(rel)}
			for _, f := range p.EmbedFiles {
				need = append(need, path.Join(filepath.ToSlash(rel), f))
			}
			for _, n := range need {
				if err := inTree(b, n); err != nil {
					problems = append(problems, fmt.Sprintf("go build %s imports %s: %v", b.Package, p.ImportPath, err))
					break
				}
			}
		}
	}
	recipes := recipeImages()
	for _, name := range []string{"fleetd", "worker"} {
		stage := name
		if name == "fleetd" {
			stage = m.Default
		}
		got, ok := m.Images[stage]
		if !ok {
			problems = append(problems, fmt.Sprintf("no stage %s", stage))
			continue
		}
		if diff := cmp.Diff(recipes[name], got); diff != "" {
			problems = append(problems, fmt.Sprintf("the %s image: the Dockerfile's stage %s differs from make images' (-make images +Dockerfile):\n%s", name, stage, diff))
		}
	}
	return problems
}

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDockerfileBuildsWhatMakeImagesBuilds holds the Dockerfile to what
// `go list -deps` says its binaries import (every package of the module
// copied, where the build expects it, and not left out by .dockerignore)
// and to the recipes of `make images` (the same programs at the same
// paths, the same Debian packages, links, user, home, env, entrypoint).
func TestDockerfileBuildsWhatMakeImagesBuilds(t *testing.T) {
	for _, p := range dockerfileProblems(t, readRepoFile(t, "Dockerfile"), readRepoFile(t, ".dockerignore")) {
		t.Error(p)
	}
}

// TestDockerfileProblemsAreFound changes the Dockerfile in each way the
// check above is there to catch, and wants it caught.
func TestDockerfileProblemsAreFound(t *testing.T) {
	dockerfile, ignore := readRepoFile(t, "Dockerfile"), readRepoFile(t, ".dockerignore")
	cases := map[string]struct {
		edits  [][2]string
		ignore string
		want   string
	}{
		"a package not copied":      {edits: [][2]string{{"COPY panehost/ panehost/\n", ""}}, want: "imports github.com/fleetd/fleetd/panehost: no COPY"},
		"copied elsewhere":          {edits: [][2]string{{"COPY panehost/ panehost/\n", "COPY panehost/ ph/\n"}}, want: "panehost is copied to /src/ph"},
		"copied after the build":    {edits: [][2]string{{"COPY panehost/ panehost/\n", ""}, {"\n# The agent CLIs", "\nCOPY panehost/ panehost/\n\n# The agent CLIs"}}, want: "panehost: no COPY before line"},
		"left out by .dockerignore": {ignore: "\npanehost/\n", want: ".dockerignore leaves out panehost"},
		"embedded files left out":   {ignore: "\nconfig/crd/bases/\n", want: "imports github.com/fleetd/fleetd/config/crd: .dockerignore leaves out config/crd/bases"},
		"go.sum not copied":         {edits: [][2]string{{"COPY go.mod go.sum ./", "COPY go.mod ./"}}, want: "no COPY before line"},
		"another build flag":        {edits: [][2]string{{"go build -trimpath -buildvcs=false -o /out/paneserver", "go build -buildvcs=false -o /out/paneserver"}}, want: "flags"},
		"a program elsewhere":       {edits: [][2]string{{"COPY --from=build /out/scripted-agent /usr/local/bin/scripted-agent\nUSER 65532:65532\nENTRYPOINT", "COPY --from=build /out/scripted-agent /scripted-agent\nUSER 65532:65532\nENTRYPOINT"}}, want: "the fleetd image"},
		"another program at a path": {edits: [][2]string{{"-o /out/paneserver ./cmd/paneserver", "-o /out/paneserver ./cmd/fleetd"}}, want: "./cmd/paneserver"},
		"another user":              {edits: [][2]string{{"USER 65532:65532\nCMD", "USER 0:0\nCMD"}}, want: "the worker image"},
		"another entrypoint":        {edits: [][2]string{{`ENTRYPOINT ["/fleetd"]`, `ENTRYPOINT ["/paneserver"]`}}, want: "Entrypoint"},
		"another env":               {edits: [][2]string{{"HOME=/home/agent", "HOME=/root"}}, want: "Env"},
		"another package":           {edits: [][2]string{{"ca-certificates nodejs git", "ca-certificates nodejs"}}, want: "Packages"},
		"no agent CLI link":         {edits: [][2]string{{" && \\\n    ln -s /opt/fleetd/agents/node_modules/.bin/codex /usr/local/bin/codex", ""}}, want: "Symlinks"},
		"the agents elsewhere":      {edits: [][2]string{{"COPY --from=agents /opt/fleetd/agents /opt/fleetd/agents", "COPY --from=agents /opt/fleetd/agents /opt/agents"}}, want: "Trees"},
		"another default target":    {edits: [][2]string{{"FROM base AS fleetd", "FROM base AS fleetd\nFROM worker AS last"}}, want: "stage last"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			df := dockerfile
			for _, e := range tc.edits {
				if !strings.Contains(df, e[0]) {
					t.Fatalf("the Dockerfile has no %q to change", e[0])
				}
				df = strings.Replace(df, e[0], e[1], 1)
			}
			problems := dockerfileProblems(t, df, ignore+tc.ignore)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("problems %q: want one saying %q", problems, tc.want)
			}
		})
	}
}
