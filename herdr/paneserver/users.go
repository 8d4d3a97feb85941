package paneserver

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fleetd/fleetd/herdr"
)

// Members on one pane server must not act as each other. Where the server
// may switch users (it runs as root, or holds CAP_SETUID and CAP_SETGID),
// each workspace's processes run under a Unix user of their own, with a
// home of their own, so one member cannot read another's processes,
// environment or files; and every socket call is authorised by the
// caller's peer credentials: a member's user may report, read, type and
// close only in its own panes, and only the server's own user (fleetd)
// may do everything. This is where fleetd's pane server differs from
// herdr, whose socket is its one user's (mode 0600) and open to all of it.

// UserOptions give each workspace a Unix user of its own.
type UserOptions struct {
	// FirstUID is the first user id given out; each workspace label gets
	// the next one. Its group id is the same number.
	FirstUID uint32
	// HomeRoot is where each user gets a home directory of its own, mode
	// 0700. It is created, traversable by all (0711).
	HomeRoot string
	// Trusted are users that may do everything, as the server's own: fleetd
	// running as a user of its own beside a pane server that runs as root.
	Trusted []uint32
}

// DefaultFirstUID is where workspace users start: far above the users a
// distribution hands out.
const DefaultFirstUID = 2_000_000

// MinFirstUID is the lowest first user id workspace users may have: below
// it lie the system's users and the people's a distribution hands out.
const MinFirstUID = 65536

// CanSwitchUsers reports whether this process may run children as other
// users: it is root, or holds CAP_SETUID and CAP_SETGID.
func CanSwitchUsers() bool {
	return os.Geteuid() == 0 || hasCapabilities(unix.CAP_SETUID, unix.CAP_SETGID)
}

// hasCapabilities reports whether this process holds every one of caps in
// its effective set.
func hasCapabilities(caps ...int) bool {
	eff, ok := effectiveCapabilities()
	if !ok {
		return false
	}
	for _, c := range caps {
		if eff&(1<<c) == 0 {
			return false
		}
	}
	return true
}

// effectiveCapabilities reads this process's effective capability set.
func effectiveCapabilities() (uint64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		hex, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		return caps, err == nil
	}
	return 0, false
}

// workspaceUser is the Unix user a workspace's processes run as.
type workspaceUser struct {
	uid  uint32
	home string
}

// labelUIDs is how many user ids labels hash into; unlabelled workspaces
// get ids above them.
const labelUIDs = 1 << 20

// users hands out one user per workspace label; nil when the server runs
// everything as itself. A label's user id is a hash of it, so the same
// workspace runs as the same user (who owns its files) after the server
// restarts; a clash takes the next free id.
type users struct {
	opts    UserOptions
	byLabel map[string]uint32
	used    map[uint32]string
	next    uint32
	// hideProcesses gives each pane a /proc that shows only its user's
	// processes; it takes CAP_SYS_ADMIN, which the server in fleetd's Pod
	// does not hold.
	hideProcesses bool
}

func newUsers(opts UserOptions) (*users, error) {
	if opts.FirstUID == 0 {
		opts.FirstUID = DefaultFirstUID
	}
	if opts.FirstUID < MinFirstUID || opts.FirstUID > math.MaxUint32-2*labelUIDs {
		return nil, fmt.Errorf("paneserver: workspace users from %d: want a first user id from %d to %d, clear of the system's users", opts.FirstUID, MinFirstUID, math.MaxUint32-2*labelUIDs)
	}
	if opts.HomeRoot == "" {
		return nil, fmt.Errorf("paneserver: workspace users need a home root")
	}
	if err := os.MkdirAll(opts.HomeRoot, 0o711); err != nil {
		return nil, fmt.Errorf("paneserver: creating the users' home root: %w", err)
	}
	if err := os.Chmod(opts.HomeRoot, 0o711); err != nil {
		return nil, err
	}
	return &users{
		opts: opts, byLabel: map[string]uint32{}, used: map[uint32]string{}, next: opts.FirstUID + labelUIDs,
		hideProcesses: hasCapabilities(unix.CAP_SYS_ADMIN),
	}, nil
}

// forLabel is the user of the workspace labelled label, given out on first
// use; a workspace without a label gets a user of its own.
func (u *users) forLabel(label string) (workspaceUser, error) {
	uid, ok := u.byLabel[label]
	switch {
	case label == "":
		uid = u.next
		u.next++
		u.used[uid] = ""
	case !ok:
		h := fnv.New32a()
		_, _ = h.Write([]byte(label))
		uid = u.opts.FirstUID + h.Sum32()%labelUIDs
		for _, taken := u.used[uid]; taken; _, taken = u.used[uid] {
			uid = u.opts.FirstUID + (uid-u.opts.FirstUID+1)%labelUIDs
		}
		u.byLabel[label], u.used[uid] = uid, label
	}
	if !u.inRange(uid) {
		// A last guard: a workspace's shell never runs as root or as a
		// user of the system's.
		return workspaceUser{}, fmt.Errorf("user %d of workspace %q is outside the workspaces' users", uid, label)
	}
	home := filepath.Join(u.opts.HomeRoot, strconv.FormatUint(uint64(uid), 10))
	if err := os.Mkdir(home, 0o700); err != nil && !os.IsExist(err) {
		return workspaceUser{}, fmt.Errorf("creating the home of user %d: %w", uid, err)
	}
	// Whatever was there is the user's: a home made in an earlier run
	// may be owned by nobody else.
	if err := os.Lchown(home, int(uid), int(uid)); err != nil {
		return workspaceUser{}, fmt.Errorf("giving user %d its home: %w", uid, err)
	}
	return workspaceUser{uid: uid, home: home}, nil
}

// inRange reports whether uid is one the workspaces' users may have: one
// of the 2*labelUIDs from FirstUID up, never root, a user of the system's
// or a trusted one.
func (u *users) inRange(uid uint32) bool {
	return uid != 0 && uid >= u.opts.FirstUID && uid-u.opts.FirstUID < 2*labelUIDs && !slices.Contains(u.opts.Trusted, uid)
}

// has reports whether uid is one of the workspace users.
func (u *users) has(uid uint32) bool {
	if u == nil {
		return false
	}
	_, ok := u.used[uid]
	return ok
}

// caller is who sent a request: fleetd (the server's own user, root, or a
// TLS client the TLS configuration admitted), or a workspace's user.
type caller struct {
	full bool
	uid  uint32
}

// callerOf reads the peer credentials of a socket connection. A
// connection that is not a unix socket came through TLS.
func callerOf(conn net.Conn) caller {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return caller{full: true}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return caller{}
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return caller{}
	}
	if cred.Uid == 0 || int(cred.Uid) == os.Geteuid() {
		return caller{full: true, uid: cred.Uid}
	}
	return caller{uid: cred.Uid}
}

// paneTargets names the panes a request acts on, by id or agent target,
// for the methods a workspace's user may call at all; ok is false for
// every other method.
func paneTargets(method string, params any) (panes, agents []string, ok bool) {
	switch p := params.(type) {
	case herdr.PaneReportAgentParams:
		return []string{p.PaneID}, nil, true
	case herdr.PaneReleaseAgentParams:
		return []string{p.PaneID}, nil, true
	case herdr.PaneClearAgentAuthorityParams:
		return []string{p.PaneID}, nil, true
	case herdr.PaneSendInputParams:
		return []string{p.PaneID}, nil, true
	case herdr.PaneSendKeysParams:
		return []string{p.PaneID}, nil, true
	case herdr.PaneTarget:
		return []string{p.PaneID}, nil, method == herdr.MethodPaneClose
	case herdr.ReadParams:
		if method == herdr.MethodPaneRead {
			return []string{p.PaneID}, nil, true
		}
		return nil, []string{p.Target}, true
	case herdr.AgentTarget:
		return nil, []string{p.Target}, method == herdr.MethodAgentGet
	case herdr.AgentPromptParams:
		return nil, []string{p.Target}, true
	case herdr.AgentWaitParams:
		return nil, []string{p.Target}, true
	case herdr.EventsSubscribeParams:
		for _, sub := range p.Subscriptions {
			if sub.PaneID == "" {
				// A lifecycle subscription sees every workspace's events.
				return nil, nil, false
			}
			panes = append(panes, sub.PaneID)
		}
		return panes, nil, true
	}
	return nil, nil, false
}

// authorize decides whether c may make a request: fleetd may do anything;
// a workspace's user may call only the methods that act on panes, and only
// on panes of its own workspaces; anyone else may only ping.
func (s *Server) authorize(c caller, method string, params any) *herdr.Error {
	if c.full || method == herdr.MethodPing || s.sess.users != nil && slices.Contains(s.sess.users.opts.Trusted, c.uid) {
		return nil
	}
	if !s.sess.users.has(c.uid) {
		return errorf(herdr.CodePermissionDenied, "user %d may not use this pane server", c.uid)
	}
	panes, agents, ok := paneTargets(method, params)
	if !ok {
		return errorf(herdr.CodePermissionDenied, "%s is for fleetd alone; a member's user may act only on its own panes", method)
	}
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	for _, id := range panes {
		if p := s.sess.panes[id]; p == nil || p.ws.user == nil || p.ws.user.uid != c.uid {
			return errorf(herdr.CodePermissionDenied, "pane %s is not yours", id)
		}
	}
	for _, target := range agents {
		p, err := s.sess.resolveAgentLocked(target)
		if err != nil || p.ws.user == nil || p.ws.user.uid != c.uid {
			return errorf(herdr.CodePermissionDenied, "agent %s is not yours", target)
		}
	}
	return nil
}
