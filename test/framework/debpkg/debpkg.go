// Package debpkg installs, with apt, the Debian packages that provide files
// a command needs, and says clearly what is missing when it cannot.
package debpkg

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Requirement is a file a command needs from the machine, and the Debian
// package that installs it.
type Requirement struct {
	// Path is a command looked up in PATH (and Debian's sbin directories)
	// when Command is set, else a file.
	Path    string
	Package string
	Command bool
}

// Missing are the Debian packages that would install what is missing from
// reqs, each once, in order.
func Missing(reqs []Requirement, have func(Requirement) bool) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range reqs {
		if have(r) || seen[r.Package] {
			continue
		}
		seen[r.Package] = true
		out = append(out, r.Package)
	}
	return out
}

// Have says whether r is on this machine.
func Have(r Requirement) bool {
	if !r.Command {
		_, err := os.Stat(r.Path)
		return err == nil
	}
	if _, err := exec.LookPath(r.Path); err == nil {
		return true
	}
	// Debian puts some in sbin, which a user's PATH may lack.
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if fi, err := os.Stat(d + "/" + r.Path); err == nil && fi.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

// Ensure installs the Debian packages that provide what is missing of
// reqs, for what (a phrase such as "the local cluster"), and fails naming
// whatever is still missing.
func Ensure(out io.Writer, what string, reqs []Requirement) error {
	pkgs := Missing(reqs, Have)
	if len(pkgs) == 0 {
		return nil
	}
	var files []string
	for _, r := range reqs {
		if !Have(r) {
			files = append(files, r.Path)
		}
	}
	needs := fmt.Sprintf("%s needs %s (from the Debian packages %s)", what, strings.Join(files, ", "), strings.Join(pkgs, ", "))
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s, and installing them needs root", needs)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("%s, and there is no apt-get to install them with", needs)
	}
	fmt.Fprintf(out, "Installing the Debian packages %s needs: %s\n", what, strings.Join(pkgs, " "))
	install := func() error {
		cmd := exec.Command("apt-get", append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = out, out
		return cmd.Run()
	}
	if err := install(); err != nil {
		// The package lists may be missing or stale.
		upd := exec.Command("apt-get", "update")
		upd.Stdout, upd.Stderr = out, out
		if uerr := upd.Run(); uerr != nil {
			return fmt.Errorf("%s, and apt-get update failed (%v): install them by hand", needs, uerr)
		}
		if err := install(); err != nil {
			return fmt.Errorf("%s, and apt-get could not install them (%w): install them by hand", needs, err)
		}
	}
	if still := Missing(reqs, Have); len(still) > 0 {
		var left []string
		for _, r := range reqs {
			if !Have(r) {
				left = append(left, r.Path)
			}
		}
		return fmt.Errorf("%s: still missing after installing: %s (from the Debian packages %s)", what, strings.Join(left, ", "), strings.Join(still, ", "))
	}
	return nil
}
