//go:build linux && !nonetns

package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Runs returns the ids of every run that has a namespace, a root-namespace
// link or a run directory left, sorted.
func Runs() ([]string, error) {
	seen := map[string]bool{}
	entries, err := os.ReadDir(NetnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if id, _, ok := NodeOfNamespace(e.Name()); ok {
			seen[id] = true
		}
	}
	dirs, err := os.ReadDir(RunDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range dirs {
		if id, ok := strings.CutPrefix(e.Name(), Prefix); ok && runIDPattern.MatchString(id) {
			seen[id] = true
		}
	}
	out := make([]string, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// Cleanup removes every tracebed run whose id starts with prefix (every
// run when prefix is empty): the processes inside its namespaces, the
// namespaces, temporary links left in the root namespace and the run
// directory — including what a run killed with SIGKILL left. It returns
// the ids of the runs it removed.
func Cleanup(prefix string) ([]string, error) {
	all, err := Runs()
	if err != nil {
		return nil, err
	}
	var ids []string
	var errs []error
	for _, id := range all {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		ids = append(ids, id)
		if err := removeRun(id); err != nil {
			errs = append(errs, err)
		}
	}
	// Temporary veth ends of any run (tb<id><n><a|b>) still in the root
	// namespace, e.g. from a run killed while creating its links.
	links, err := LinkList()
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		if isTempLink(l.Attrs().Name, "") && strings.HasPrefix(l.Attrs().Name, "tb"+prefix) {
			if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("remove link %s: %w", l.Attrs().Name, err))
			}
		}
	}
	return ids, errors.Join(errs...)
}

// isTempLink reports whether name is a temporary veth end of run id (any
// run when id is empty).
func isTempLink(name, id string) bool {
	if l := len(name); l < 5 || (name[l-1] != 'a' && name[l-1] != 'b') {
		return false
	}
	rest, ok := strings.CutPrefix(name, "tb"+id)
	if !ok {
		return false
	}
	rest = rest[:len(rest)-1]
	if id == "" {
		// rest is <id><link number>: lowercase letters and digits only.
		return rest != "" && runIDPattern.MatchString(rest[:min(len(rest), 6)]) && strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz0123456789") == ""
	}
	_, err := strconv.Atoi(rest)
	return err == nil
}

// removeRun ends the processes in run id's namespaces, deletes the
// namespaces and temporary links and the run directory.
func removeRun(id string) error {
	var errs []error
	entries, _ := os.ReadDir(NetnsDir)
	var paths []string
	for _, e := range entries {
		if rid, _, ok := NodeOfNamespace(e.Name()); ok && rid == id {
			paths = append(paths, filepath.Join(NetnsDir, e.Name()))
		}
	}
	if err := killIn(paths); err != nil {
		errs = append(errs, err)
	}
	for _, p := range paths {
		if err := vnetns.DeleteNamed(filepath.Base(p)); err != nil && !errors.Is(err, os.ErrNotExist) {
			// A namespace whose mount is already gone is just a file.
			if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				if errors.Is(rerr, unix.EBUSY) {
					rerr = fmt.Errorf("%w: its mount is hidden below a later mount of %s on itself "+
						"(iproute2 makes one the first time 'ip netns add' runs); it goes at the next reboot, "+
						"or, when no other namespace is in use, after 'umount -l %s' and 'tracebed cleanup'",
						rerr, NetnsDir, NetnsDir)
				}
				errs = append(errs, fmt.Errorf("remove namespace %s: %w", filepath.Base(p), rerr))
			}
		}
	}
	links, err := LinkList()
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		if isTempLink(l.Attrs().Name, id) {
			if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
				errs = append(errs, fmt.Errorf("remove link %s: %w", l.Attrs().Name, err))
			}
		}
	}
	if err := os.RemoveAll(filepath.Join(RunDir, Prefix+id)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Processes returns the pids of the processes whose network namespace is one
// of the namespaces at paths (the tasks inside them: switches, shells,
// servers started with Exec).
func Processes(paths []string) ([]int, error) {
	inodes := map[uint64]bool{}
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err == nil {
			inodes[st.Ino] = true
		}
	}
	if len(inodes) == 0 {
		return nil, nil
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var pids []int
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st); err != nil {
			continue // gone, or a kernel thread
		}
		if inodes[st.Ino] {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// killIn ends every process inside the namespaces at paths: SIGTERM, then
// SIGKILL for those still there after a grace period.
func killIn(paths []string) error {
	pids, err := Processes(paths)
	if err != nil || len(pids) == 0 {
		return err
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if pids, _ = Processes(paths); len(pids) == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for range 100 {
		if pids, _ = Processes(paths); len(pids) == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("processes %v did not end", pids)
}

// Start starts cmd inside node's namespace: the new process and all its
// threads live there. Use it for switches, servers and shells.
func (n *Network) Start(node string, cmd *exec.Cmd) error {
	if n.Topology.Node(node) == nil {
		return fmt.Errorf("netns: no node %q in topology %s", node, n.Topology.Name)
	}
	return StartIn(n.NamespacePath(node), cmd)
}

// StartIn starts cmd inside the namespace at path. The child is forked from
// a thread that has entered the namespace, so it inherits it.
func StartIn(path string, cmd *exec.Cmd) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error { return cmd.Start() })
}

// CheckClean reports every tracebed object of the runs whose id starts with
// prefix (all runs for an empty prefix): namespaces, processes inside them,
// temporary links in the root namespace and run directories. Test suites
// call it at the end, with the prefix of their run ids, to prove they left
// nothing behind.
func CheckClean(prefix string) error {
	var left []string
	entries, _ := os.ReadDir(NetnsDir)
	var paths []string
	for _, e := range entries {
		if id, _, ok := NodeOfNamespace(e.Name()); ok && strings.HasPrefix(id, prefix) {
			left = append(left, "namespace "+e.Name())
			paths = append(paths, filepath.Join(NetnsDir, e.Name()))
		}
	}
	if pids, _ := Processes(paths); len(pids) > 0 {
		left = append(left, fmt.Sprintf("processes %v", pids))
	}
	links, err := LinkList()
	if err != nil {
		left = append(left, fmt.Sprintf("links unknown (%v)", err))
	}
	for _, l := range links {
		if isTempLink(l.Attrs().Name, "") && strings.HasPrefix(l.Attrs().Name, "tb"+prefix) {
			left = append(left, "link "+l.Attrs().Name)
		}
	}
	dirs, _ := os.ReadDir(RunDir)
	for _, d := range dirs {
		if strings.HasPrefix(d.Name(), Prefix+prefix) {
			left = append(left, "directory "+filepath.Join(RunDir, d.Name()))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("tracebed objects left: %s", strings.Join(left, ", "))
	}
	return nil
}

// RunTests runs a test binary's tests (m is its *testing.M) and then, as
// root, checks that none of the runs whose ids start with prefix is left
// behind: anything left is removed and the binary fails. It returns the
// exit code for os.Exit. Test binaries that bring networks up call it from
// TestMain, each with its own prefix (TestRunID), so binaries running at
// the same time only check and clean up their own runs.
func RunTests(m interface{ Run() int }, prefix string) int {
	code := m.Run()
	if os.Geteuid() == 0 {
		if err := CheckClean(prefix); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: left behind after the tests:", err)
			Cleanup(prefix)
			code = 1
		}
	}
	return code
}

// LinkList lists the links of the calling thread's network namespace, as
// netlink.LinkList does, dumping again while the kernel reports the dump
// interrupted (netlink.ErrDumpInterrupted: links came or went meanwhile,
// as other runs' veths do in the root namespace). Such a dump may be
// incomplete, and a cleanup that trusted it could miss a link.
func LinkList() ([]netlink.Link, error) {
	var err error
	for range dumpTries {
		var links []netlink.Link
		if links, err = netlink.LinkList(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return links, err
		}
	}
	return nil, fmt.Errorf("netns: list links: %w (%d times)", err, dumpTries)
}

// dumpTries is how many times LinkList dumps before it gives up.
const dumpTries = 20
