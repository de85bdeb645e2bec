//go:build linux && !nonetns

package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/internal/units"
)

// privateMountsEnv, when set, tells TestNetnsDirMountedLater that it runs in
// a private mount namespace of its own, with the run id to use.
const privateMountsEnv = "TRACEBED_TEST_PRIVATE_MOUNTS"

// TestNetnsDirMountedLater brings a network up on a machine where NetnsDir
// is not yet a mount point (as after a reboot), lets iproute2 run
// 'ip netns add' for the first time while the network is up, and checks
// that the network still comes down. iproute2 then mounts NetnsDir on
// itself; a run whose namespaces were mounted below that could not remove
// them (EBUSY) until a reboot, which is how CI once left three behind.
//
// The machine's own mounts are not touched: the test runs again in a
// private mount namespace (unshare --mount --propagation private), where
// it unmounts NetnsDir and whatever is mounted in it first.
func TestNetnsDirMountedLater(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed (util-linux, iproute2)", tool)
		}
	}
	if id := os.Getenv(privateMountsEnv); id != "" {
		inPrivateMounts(t, id)
		return
	}
	id := TestRunID(testPrefix)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private",
		os.Args[0], "-test.run", "^TestNetnsDirMountedLater$", "-test.v", "-test.count", "1")
	cmd.Env = append(os.Environ(), privateMountsEnv+"="+id)
	out, err := cmd.CombinedOutput()
	t.Logf("in a private mount namespace:\n%s", out)
	// The namespaces die with the private mount namespace; files it left
	// in NetnsDir are plain files out here.
	if rerr := removeRun(id); rerr != nil {
		t.Errorf("remove what the run left: %v", rerr)
	}
	if err != nil {
		t.Fatalf("unshare: %v", err)
	}
}

func inPrivateMounts(t *testing.T, id string) {
	// Unmount, in this mount namespace only, NetnsDir and the namespaces of
	// runs that are up elsewhere, deepest first, so NetnsDir is a plain
	// directory as on a machine just booted.
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatalf("%s: mounts remain after unmounting ten times", NetnsDir)
		}
		under, err := mountsUnder(NetnsDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range under {
			unix.Unmount(p, unix.MNT_DETACH)
		}
		if err := unix.Unmount(NetnsDir, unix.MNT_DETACH); err != nil {
			if !errors.Is(err, unix.EINVAL) {
				t.Fatal(err)
			}
			if len(under) == 0 {
				break
			}
		}
	}
	n := up(t, star(t, 2, units.Gbps), Options{RunID: id})
	probe := n.Namespace("probe")
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", probe, err, out)
	}
	if out, err := exec.Command("ip", "netns", "del", probe).CombinedOutput(); err != nil {
		t.Errorf("ip netns del %s: %v: %s", probe, err, out)
	}
	if err := n.Down(); err != nil {
		t.Fatalf("down after 'ip netns add': %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(NetnsDir, Prefix+id+"-*"))
	if len(left) > 0 {
		t.Errorf("namespaces left: %v", left)
	}
}

// TestLinkListWhileLinksChange lists a namespace's links while another
// goroutine adds and deletes links in it, as other runs do in the root
// namespace: LinkList dumps again when the kernel says a dump was
// interrupted, so it never fails and never returns a partial list (the
// namespace's loopback is always there).
func TestLinkListWhileLinksChange(t *testing.T) {
	needRoot(t)
	n := up(t, star(t, 1, units.Gbps), Options{})
	h, err := n.Handle("h1")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	// Enough links that a dump takes several messages, as in a root
	// namespace with many runs: only such a dump can be interrupted.
	for i := range 150 {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: fmt.Sprintf("still%da", i)}, PeerName: fmt.Sprintf("still%db", i)}
		if err := h.LinkAdd(v); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	churned := make(chan int)
	go func() {
		k := 0
		defer func() { churned <- k }()
		for ; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: fmt.Sprintf("churn%da", k%4)}, PeerName: fmt.Sprintf("churn%db", k%4)}
			if err := h.LinkAdd(l); err != nil {
				t.Errorf("add %s: %v", l.Name, err)
				return
			}
			h.LinkDel(l)
		}
	}()
	var lists int
	err = n.Do("h1", func() error {
		for ; lists < 200; lists++ {
			links, err := LinkList()
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(links, func(l netlink.Link) bool { return l.Attrs().Name == "lo" }) {
				return fmt.Errorf("list %d has no lo: %d links", lists, len(links))
			}
		}
		return nil
	})
	close(stop)
	k := <-churned
	if err != nil {
		t.Fatalf("after %d lists and %d links added and deleted: %v", lists, k, err)
	}
	t.Logf("%d lists while %d links were added and deleted", lists, k)
}
