//go:build linux && !nonetns

package netns

import (
	"errors"
	"fmt"
	"os"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// shareNetnsDir makes NetnsDir a shared mount point of its own before any
// namespace is mounted in it, as iproute2's 'ip netns add' does the first
// time it runs (netns_add in ip/ipnetns.c: mount the directory on itself
// with MS_BIND|MS_REC, then make it MS_SHARED|MS_REC, so that unmounting a
// namespace in one mount namespace unmounts it in all of them).
//
// Why it matters: if iproute2 does that upgrade while a run is up (a lab's
// 'ip netns add', Mininet's 'ip netns attach' in package mininet, another
// tool), the new mount of NetnsDir covers the directory in which the run's
// namespaces were mounted. The run's namespace files then resolve to the
// new mount, where they are not mount points, and their own mounts below
// it can no longer be reached by path: unlinking them fails with EBUSY
// until the machine reboots. Doing the upgrade first, as iproute2 would,
// means iproute2 finds a mount point and only marks it shared again.
//
// The upgrade is skipped, leaving the directory as it is, when a namespace
// is already mounted directly in it (by a tool that bind-mounts namespaces
// without the upgrade, such as vishvananda/netns's NewNamed, or a run of an
// older tracebed): mounting the directory over those mounts would strand
// them the same way. Runs of tracebed take turns through an flock on the
// directory, so two of them never mount it twice.
func shareNetnsDir() error {
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	d, err := os.Open(NetnsDir)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("netns: lock %s: %w", NetnsDir, err)
	}
	defer unix.Flock(int(d.Fd()), unix.LOCK_UN)
	err = unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil // a mount point already: iproute2's or ours
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("netns: make %s shared: %w", NetnsDir, err)
	}
	// EINVAL: NetnsDir is not a mount point.
	under, err := mountsUnder(NetnsDir)
	if err != nil {
		return err
	}
	if len(under) > 0 {
		return nil
	}
	if err := unix.Mount(NetnsDir, NetnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("netns: mount %s on itself: %w", NetnsDir, err)
	}
	if err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("netns: make %s shared: %w", NetnsDir, err)
	}
	return nil
}

// mountsUnder returns the mount points strictly below dir.
func mountsUnder(dir string) ([]string, error) {
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	var under []string
	for _, m := range ms {
		if m.Mountpoint != dir {
			under = append(under, m.Mountpoint)
		}
	}
	return under, nil
}
