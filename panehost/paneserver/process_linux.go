package paneserver

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// sessionProcessGroups lists the process groups with a live process in
// session sid. A job-control shell puts every job in a group of its own, so
// killing the shell's group alone would leave its jobs running.
func sessionProcessGroups(sid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	seen := map[int]bool{}
	var groups []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, ok := readProcStat(pid)
		if !ok || stat.session != sid || stat.state == 'Z' || seen[stat.pgrp] {
			continue
		}
		seen[stat.pgrp] = true
		groups = append(groups, stat.pgrp)
	}
	return groups
}

type procStat struct {
	state   byte
	pgrp    int
	session int
}

// readProcStat parses /proc/<pid>/stat. The command name may hold spaces and
// parentheses, so fields are counted from the last ')'.
func readProcStat(pid int) (procStat, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	end := bytes.LastIndexByte(raw, ')')
	if end < 0 {
		return procStat{}, false
	}
	// After the name: state ppid pgrp session ...
	fields := bytes.Fields(raw[end+1:])
	if len(fields) < 4 || len(fields[0]) != 1 {
		return procStat{}, false
	}
	pgrp, err1 := strconv.Atoi(string(fields[2]))
	session, err2 := strconv.Atoi(string(fields[3]))
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{state: fields[0][0], pgrp: pgrp, session: session}, true
}

// processCwd returns a process's working directory.
func processCwd(pid int) (string, bool) {
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	return cwd, err == nil
}

// killSession kills every process group of the session led by sid.
func killSession(sid int) {
	_ = unix.Kill(-sid, unix.SIGKILL)
	for _, pgrp := range sessionProcessGroups(sid) {
		_ = unix.Kill(-pgrp, unix.SIGKILL)
	}
}

// processIdentity reads what identifies a process as an agent: its argv,
// its command name and its environment.
func processIdentity(pid int) (argv []string, comm string, environ []string, ok bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	raw, err := os.ReadFile(dir + "cmdline")
	if err != nil {
		return nil, "", nil, false
	}
	argv = splitNUL(raw)
	if c, err := os.ReadFile(dir + "comm"); err == nil {
		comm = string(bytes.TrimSpace(c))
	}
	if env, err := os.ReadFile(dir + "environ"); err == nil {
		environ = splitNUL(env)
	}
	return argv, comm, environ, true
}

func splitNUL(raw []byte) []string {
	raw = bytes.TrimRight(raw, "\x00")
	if len(raw) == 0 {
		return nil
	}
	parts := bytes.Split(raw, []byte{0})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out
}

// processComm is a process's command name, "" when it is gone.
func processComm(pid int) string {
	c, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(c))
}

// killUser kills every process of user uid (by its real, effective or
// saved user id), sweeping /proc until a sweep finds none or a
// few sweeps went by: a process may fork while it is swept. It says how
// many are left.
func killUser(uid uint32) int {
	want := strconv.FormatUint(uint64(uid), 10)
	left := 0
	for range 10 {
		left = 0
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return 0
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || !processOf(pid, want) {
				continue
			}
			if st, ok := readProcStat(pid); !ok || st.state == 'Z' {
				// Dead already, waiting for its parent.
				continue
			}
			left++
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if left == 0 {
			return 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	return left
}

// processOf reports whether process pid's real, effective or saved user
// id is uid. Its file system user id is left out: a privileged process
// takes a member's on a thread to touch the member's files (memberfs.As),
// and when that thread is the main one, /proc shows the whole process
// with it; that process is no member's, and a member's own process cannot
// take a file system id that is not one of its other three.
func processOf(pid int, uid string) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for line := range bytes.Lines(raw) {
		ids, ok := bytes.CutPrefix(line, []byte("Uid:"))
		if !ok {
			continue
		}
		fields := bytes.Fields(ids)
		return slices.ContainsFunc(fields[:min(3, len(fields))], func(id []byte) bool { return string(id) == uid })
	}
	return false
}
