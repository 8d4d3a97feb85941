package paneserver

import (
	"bufio"
	"errors"
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
	"github.com/fleetd/fleetd/internal/memberfs"
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

// CanMakeNamespaces reports whether this process may give each pane a
// mount namespace of its own, in which its workspace's user has a name and
// a /tmp of its own: it holds CAP_SYS_ADMIN, as root does.
func CanMakeNamespaces() bool { return canMakeNamespaces() }

// workspaceUser is the Unix user a workspace's processes run as.
type workspaceUser struct {
	uid uint32
	// name is the user's name (userName), and its group's.
	name string
	// home is its home directory, tmp its temporary one, both its own.
	home, tmp string
	// etc holds the passwd and group files its panes see (identity.go).
	etc string
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
	// names are the users' names, given on first use.
	names map[uint32]string
	// shell is each user's login shell, in its passwd entry.
	shell string
	// namespaces says each pane gets a mount namespace of its own, in
	// which its user has a name (identity.go).
	namespaces bool
}

func newUsers(opts UserOptions, shell string) (*users, error) {
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
		names:         map[uint32]string{}, shell: shell, namespaces: canMakeNamespaces(),
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
		uid = u.opts.FirstUID + labelHash(label)%labelUIDs
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
	wu := u.layout(uid)
	if wu.name = u.names[uid]; wu.name == "" {
		wu.name = userName(label, uid, func(name string) bool { return systemNames()[name] })
		u.names[uid] = wu.name
	}
	if err := makeOwnDir(wu.home, uid); err != nil {
		return workspaceUser{}, fmt.Errorf("giving user %d its home: %w", uid, err)
	}
	if err := makeOwnDir(wu.tmp, uid); err != nil {
		return workspaceUser{}, fmt.Errorf("giving user %d its temporary directory: %w", uid, err)
	}
	return wu, nil
}

// layout is where user uid's files lie.
func (u *users) layout(uid uint32) workspaceUser {
	id := strconv.FormatUint(uint64(uid), 10)
	return workspaceUser{
		uid:  uid,
		home: filepath.Join(u.opts.HomeRoot, id),
		tmp:  filepath.Join(u.opts.HomeRoot, tmpRoot, id),
		etc:  filepath.Join(u.opts.HomeRoot, etcRoot, id),
	}
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

// RemoveWorkspaceUser removes what the user of the workspace labelled
// label has on the machine, once its Member is gone: every process it
// still runs (one that left its pane's session too), its home, its
// temporary directory and its passwd and group files. Its user id is
// then free for another label. It refuses while a workspace of the label
// is open; a label with no user is done at once. What the user owns is
// removed without following a link in it (memberfs.RemoveTree).
func (s *Server) RemoveWorkspaceUser(label string) error {
	u := s.sess.users
	if u == nil || label == "" {
		return nil
	}
	s.sess.mu.Lock()
	for _, ws := range s.sess.workspaces {
		if ws.label == label {
			s.sess.mu.Unlock()
			return fmt.Errorf("workspace %s of %q is open: close it first", ws.id, label)
		}
	}
	for p := range s.sess.starting {
		if p.ws.label == label {
			s.sess.mu.Unlock()
			return fmt.Errorf("a pane of workspace %s of %q is starting: close it first", p.ws.id, label)
		}
	}
	uid, ok := u.byLabel[label]
	if !ok {
		uid = u.opts.FirstUID + labelHash(label)%labelUIDs
		if _, taken := u.used[uid]; taken || !u.inRange(uid) {
			// The label's hash is another label's user: nothing of this
			// label's is known to be there.
			s.sess.mu.Unlock()
			return nil
		}
		// A user given out before the server restarted: its files are
		// still there.
		u.used[uid] = label
	}
	// Still marked used, so no other label takes the id while its files
	// go.
	delete(u.byLabel, label)
	s.sess.mu.Unlock()

	err := removeUserFiles(u.layout(uid))
	s.sess.mu.Lock()
	delete(u.used, uid)
	delete(u.names, uid)
	s.sess.mu.Unlock()
	return err
}

func removeUserFiles(wu workspaceUser) error {
	if left := killUser(wu.uid); left > 0 {
		return fmt.Errorf("user %d still runs %d processes", wu.uid, left)
	}
	var errs []error
	for _, dir := range []string{wu.home, wu.tmp, wu.etc} {
		if err := memberfs.RemoveTree(dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s of user %d: %w", dir, wu.uid, err))
		}
	}
	return errors.Join(errs...)
}

// labelHash is where a label's user id falls among the labels' ids.
func labelHash(label string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(label))
	return h.Sum32()
}
