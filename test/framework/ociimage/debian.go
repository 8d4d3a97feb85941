package ociimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fleetd/fleetd/test/framework/debpkg"
)

// DebianSuite is the Debian release the images' root filesystems come
// from, the one this project's machines run.
const DebianSuite = "bookworm"

// Debian is a minimal Debian root filesystem made from Debian's packages
// with mmdebstrap: the Essential packages (a shell, coreutils, dpkg; no
// apt) plus Include, without documentation, manuals or translations, with
// the agent user (uid 65532) and its home.
type Debian struct {
	// Name names the cached tar.
	Name    string
	Include []string
}

// The root filesystems: fleetd's images need a shell for the pane
// server's panes; the worker adds node (for the agent CLIs) and git.
var (
	DebianBase   = Debian{Name: "base", Include: []string{"ca-certificates"}}
	DebianWorker = Debian{Name: "worker", Include: []string{"ca-certificates", "nodejs", "git"}}
)

// args are mmdebstrap's arguments, but for the output and the mirror.
func (d Debian) args() []string {
	hooks := []string{
		`echo 'agent:x:65532:65532:agent:/home/agent:/bin/sh' >> "$1/etc/passwd"`,
		`echo 'agent:x:65532:' >> "$1/etc/group"`,
		`echo 'agent:!::0:99999:7:::' >> "$1/etc/shadow"`,
		`mkdir -p "$1/home/agent" && chown 65532:65532 "$1/home/agent"`,
		// What tells one build from another: logs and caches.
		`rm -rf "$1"/var/log/* "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old`,
	}
	args := []string{
		"--variant=essential",
		"--mode=root",
		"--format=tar",
		"--include=" + strings.Join(d.Include, ","),
		"--dpkgopt=path-exclude=/usr/share/man/*",
		"--dpkgopt=path-exclude=/usr/share/info/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*",
		"--dpkgopt=path-exclude=/usr/share/doc/*",
		// Licences stay.
		"--dpkgopt=path-include=/usr/share/doc/*/copyright",
	}
	for _, h := range hooks {
		args = append(args, "--customize-hook="+h)
	}
	return args
}

// key names the cache of d: a new one whenever what it is made of changes.
func (d Debian) key(epoch int64, sources string) string {
	h := sha256.New()
	fmt.Fprintln(h, DebianSuite, epoch, sources)
	for _, a := range d.args() {
		fmt.Fprintln(h, a)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// aptSources is the machine's apt configuration, which the root
// filesystems are made from: the mirror this machine reaches.
func aptSources() (string, error) {
	var b strings.Builder
	for _, pattern := range []string{"/etc/apt/sources.list", "/etc/apt/sources.list.d/*.sources", "/etc/apt/sources.list.d/*.list"} {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "# %s\n%s\n", f, data)
		}
	}
	return b.String(), nil
}

// debianRequirements are what making a root filesystem takes.
var debianRequirements = []debpkg.Requirement{{Path: "mmdebstrap", Package: "mmdebstrap", Command: true}}

// Rootfs returns the normalized root filesystem tar of d, made with
// mmdebstrap the first time and cached in Dir/debian after, with the list of
// the packages it holds beside it (<tar>.packages). The same packages give
// the same tar: what a rebuild on another day gives depends on the versions
// the mirror serves then.
func (b *Builder) Rootfs(ctx context.Context, d Debian, out io.Writer) (string, error) {
	sources, err := aptSources()
	if err != nil {
		return "", err
	}
	epoch := b.Epoch.Unix()
	dir := filepath.Join(b.Dir, "debian")
	final := filepath.Join(dir, d.Name+"-"+d.key(epoch, sources)+".tar")
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	if err := debpkg.Ensure(out, "building the images' Debian root filesystem", debianRequirements); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	raw := final + ".mmdebstrap"
	args := append(d.args(),
		"--customize-hook=chroot \"$1\" dpkg-query -W -f='${Package} ${Version}\\n' > "+shellQuote(final+".packages"),
		DebianSuite, raw)
	// The machine's sources, whose file mmdebstrap reads in place of a
	// mirror URL; a deb822 file must end in .sources for that.
	srcFile := filepath.Join(dir, "sources.list")
	if strings.Contains(sources, "Types:") {
		srcFile = filepath.Join(dir, "debian.sources")
	}
	if err := os.WriteFile(srcFile, []byte(sources), 0o644); err != nil {
		return "", err
	}
	args = append(args, srcFile)
	fmt.Fprintf(out, "Making the Debian %s root filesystem %q with mmdebstrap (once; cached in %s)\n", DebianSuite, d.Name, dir)
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch, 10))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		os.Remove(raw)
		return "", fmt.Errorf("mmdebstrap: %w", err)
	}
	if err := NormalizeRootfs(raw, final, b.Epoch); err != nil {
		return "", err
	}
	return final, os.Remove(raw)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
