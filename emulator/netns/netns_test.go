//go:build linux && !nonetns

package netns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/internal/testproc"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// TestMain checks, after the whole suite, that no tracebed namespace, link
// or run directory is left behind.
func TestMain(m *testing.M) {
	os.Exit(RunTests(m, testPrefix))
}

// testPrefix starts the run ids of this test binary: the package's letter
// and two random characters, so test binaries running at the same time
// (other packages, or other `go test` invocations) check and clean up only
// their own runs.
var testPrefix = "n" + NewRunID()[:2]

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: bringing up namespaces needs root (CI runs as root)")
	}
}

func star(t testing.TB, hosts int, rate units.Rate) *topologies.Topology {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: hosts, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star-test")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func up(t testing.TB, top *topologies.Topology, opts Options) *Network {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if opts.RunID == "" {
		opts.RunID = TestRunID(testPrefix)
	}
	n, err := Up(ctx, top, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Down(); err != nil {
			t.Error(err)
		}
	})
	return n
}

func TestUpBridgeStar(t *testing.T) {
	needRoot(t)
	n := up(t, star(t, 3, units.Gbps), Options{Bridge: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hosts := n.Topology.Hosts()
	for _, a := range hosts {
		for _, b := range hosts {
			if a == b {
				continue
			}
			if _, err := n.Ping(ctx, a.Name, b.IP, 1); err != nil {
				t.Error(err)
			}
		}
	}
	if err := n.TCPCheck(ctx, "h1", "h2", 1<<20); err != nil {
		t.Error(err)
	}
	// The bridge runs no netfilter hooks on its frames (where the kernel
	// has br_netfilter).
	err := n.Do("tor", func() error {
		b, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables")
		if errors.Is(err, fs.ErrNotExist) {
			t.Log("no br_netfilter in this kernel")
			return nil
		}
		if err == nil && strings.TrimSpace(string(b)) != "0" {
			err = fmt.Errorf("bridge-nf-call-iptables = %s in the switch's namespace, want 0", b)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
	// The namespaces are named with the run's prefix and the interfaces
	// carry their topology names and MACs.
	h, err := n.Handle("h1")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	l, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.Attrs().HardwareAddr.String(), n.Topology.Node("h1").MAC.String(); got != want {
		t.Errorf("h1 eth0 MAC %s, want %s", got, want)
	}
	if err := n.Do("h1", func() error { return checkOffloadOff("eth0") }); err != nil {
		t.Error(err)
	}
	if err := n.UnbridgeSwitches(); err != nil {
		t.Fatal(err)
	}
	// Without a switch nothing forwards.
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	if _, err := n.Ping(sctx, "h1", n.Topology.Node("h2").IP, 2); err == nil {
		t.Error("ping went through with no switch running")
	}
}

func TestBridgeRefusesLoops(t *testing.T) {
	f, _ := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: 2, Leaves: 2, HostsPerLeaf: 1})
	top, err := f.Build("ls")
	if err != nil {
		t.Fatal(err)
	}
	if err := loopFree(top); err == nil {
		t.Error("leaf-spine reported loop-free")
	}
	if err := loopFree(star(t, 4, units.Gbps)); err != nil {
		t.Error(err)
	}
}

// TestShapingRate sends UDP as fast as a socket allows through a host link
// shaped by HTB and checks the receiver sees the link's rate within 10%:
// at 40 Mbit/s with 1,400-byte payloads, and at 2.5 Mbit/s with jumbo
// frames five times the token bucket (1,600 bytes), which HTB must
// still pass at the link's rate. (BenchmarkShapingRate measures 400
// Mbit/s: there the result depends on how much CPU a loaded 2-core machine
// leaves the sender and the softirqs.)
func TestShapingRate(t *testing.T) {
	needRoot(t)
	for _, c := range []struct {
		rate    units.Rate
		payload int
	}{
		{40 * units.Mbps, 1400},
		{2500 * units.Kbps, 8000},
	} {
		got, rate := shapingRate(t, c.rate, c.payload)
		if r := got / float64(rate); r < 0.9 || r > 1.1 {
			t.Errorf("received %.2f Mbit/s through a %v link with %d-byte payloads: off by more than 10%%", got/1e6, rate, c.payload)
		}
	}
}

// TestShapingBurst checks what a shaped host link lets out at once after
// an idle spell: the token bucket (at 2.5 Mbit/s, one 1,600-byte frame) and the
// frame being sent, then the link's rate. A host that sent more in one burst than the
// simulated link would have overflowed a scaled switch buffer of a few
// frames (the dynaina-netns ring at scale 40,000 lost half its speed to
// the timeouts). 40 frames go to the socket at once; the receiver's
// interface counter, read right after, must show no more than the bucket,
// one frame and the link's rate over the time taken.
func TestShapingBurst(t *testing.T) {
	needRoot(t)
	rate := 2500 * units.Kbps
	n := up(t, star(t, 2, rate), Options{Bridge: true})
	h2 := n.Topology.Node("h2")
	var tx net.PacketConn
	if err := n.Do("h1", func() (err error) { tx, err = net.ListenPacket("udp4", ":0"); return }); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	dst := &net.UDPAddr{IP: net.IP(h2.IP.AsSlice()), Port: 9000} // nobody listens: h2's counter sees the frames
	const payload, frames = 300, 40
	frame := payload + 8 + 20 + 14 // the bytes an interface counts
	buf := make([]byte, payload)
	for try := 0; ; try++ {
		time.Sleep(50 * time.Millisecond) // idle: the bucket fills
		b0 := rxBytes(t, n, "h2")
		t0 := time.Now()
		for range frames {
			if _, err := tx.WriteTo(buf, dst); err != nil {
				t.Fatal(err)
			}
		}
		got := rxBytes(t, n, "h2") - b0
		el := time.Since(t0)
		allowed := float64(htbBucket(uint64(rate), DefaultMTU+100)) + float64(frame) + float64(rate)/8*el.Seconds()
		t.Logf("try %d: %d bytes (%d frames) arrived within %v of the first send; bucket, one frame and the rate allow %.0f", try, got, int(got)/frame, el, allowed)
		if float64(got) > allowed+float64(frame) { // one frame of slack for the counter's rounding
			t.Fatalf("a host put %d bytes on a %v link at once after idling; want at most %.0f", got, rate, allowed)
		}
		if el < 10*time.Millisecond {
			return
		}
		// Descheduled between the sends and the read: the bound was too
		// loose to tell a burst from the rate. Let the link drain, again.
		if try == 4 {
			t.Skipf("the machine kept this test from running for %v between sending and counting, five times: too loaded to measure a burst", el)
		}
		time.Sleep(time.Duration(frames*frame*8) * time.Second / time.Duration(rate))
	}
}

func BenchmarkShapingRate(b *testing.B) {
	needRoot(b)
	var got float64
	rate := 400 * units.Mbps
	for range b.N {
		g, _ := shapingRate(b, rate, 1400)
		got += g
	}
	got /= float64(b.N)
	b.ReportMetric(got/1e6, "Mbit/s")
	b.ReportMetric(got/float64(rate), "fraction_of_rate")
	b.ReportMetric(0, "ns/op")
}

// shapingRate floods a link of the given rate through a Linux bridge with
// UDP datagrams of payload bytes (links of MTU 9000) and returns the rate
// arriving at the receiver (Ethernet frames, bit/s).
func shapingRate(t testing.TB, rate units.Rate, payload int) (float64, units.Rate) {
	n := up(t, star(t, 2, rate), Options{Bridge: true, MTU: 9000})
	h2 := n.Topology.Node("h2")
	var rx, tx net.PacketConn
	if err := n.Do("h2", func() (err error) { rx, err = net.ListenPacket("udp4", h2.IP.String()+":9000"); return }); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := n.Do("h1", func() (err error) { tx, err = net.ListenPacket("udp4", ":0"); return }); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	// Milliseconds of traffic in the socket buffer, so a sender that the
	// machine deschedules for a moment does not leave the link idle.
	if rc, err := tx.(*net.UDPConn).SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20) })
	}
	go func() { // drain
		buf := make([]byte, 9000)
		for {
			if _, _, err := rx.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		dst := &net.UDPAddr{IP: net.IP(h2.IP.AsSlice()), Port: 9000}
		payload := make([]byte, payload)
		for {
			select {
			case <-stop:
				return
			default:
			}
			tx.WriteTo(payload, dst)
		}
	}()
	time.Sleep(300 * time.Millisecond) // fill the queue: measure the steady state
	b0 := rxBytes(t, n, "h2")
	t0 := time.Now()
	time.Sleep(1500 * time.Millisecond)
	b1 := rxBytes(t, n, "h2")
	el := time.Since(t0)
	close(stop)
	<-done
	got := float64(b1-b0) * 8 / el.Seconds()
	t.Logf("shaped to %v: received %.2f Mbit/s (%.3f of the rate)", rate, got/1e6, got/float64(rate))
	return got, rate
}

func rxBytes(t testing.TB, n *Network, node string) uint64 {
	t.Helper()
	h, err := n.Handle(node)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	l, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Statistics.RxBytes
}

func TestCleanupAfterAbandonedRun(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	n, err := Up(ctx, star(t, 2, units.Gbps), Options{RunID: TestRunID(testPrefix)})
	if err != nil {
		t.Fatal(err)
	}
	// A stray temporary link, as a run killed while creating links leaves.
	stray := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: tempLink(n.RunID, 99, 'a')}, PeerName: tempLink(n.RunID, 99, 'b')}
	if err := netlink.LinkAdd(stray); err != nil {
		t.Fatal(err)
	}
	ids, err := Cleanup(n.RunID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, id := range ids {
		found = found || id == n.RunID
	}
	if !found {
		t.Errorf("Cleanup removed runs %v, not %s", ids, n.RunID)
	}
	if err := CheckClean(n.RunID); err != nil {
		t.Error(err)
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name, id, node string
		ok             bool
	}{
		{"tb-abc123-h1", "abc123", "h1", true},
		{"tb-abc123-leaf-1", "abc123", "leaf-1", true},
		{"tb-ABC-h1", "", "", false},
		{"other", "", "", false},
		{"tb-abc123", "", "", false},
	} {
		id, node, ok := NodeOfNamespace(tc.name)
		if ok != tc.ok || (ok && (id != tc.id || node != tc.node)) {
			t.Errorf("NodeOfNamespace(%q) = %q, %q, %v", tc.name, id, node, ok)
		}
	}
	for _, tc := range []struct {
		name, id string
		want     bool
	}{
		{"tbabc12312a", "abc123", true},
		{"tbabc12312b", "", true},
		{"tbabc123xa", "abc123", false},
		{"eth0", "", false},
		{"tb-x", "", false},
	} {
		if got := isTempLink(tc.name, tc.id); got != tc.want {
			t.Errorf("isTempLink(%q, %q) = %v", tc.name, tc.id, got)
		}
	}
}

// TestCapture records a ping exchange on a host's interface as pcapng and
// reads it back (with tshark too, when it is installed).
func TestCapture(t *testing.T) {
	needRoot(t)
	n := up(t, star(t, 2, units.Gbps), Options{Bridge: true})
	path := filepath.Join(t.TempDir(), "h1.pcapng")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	var count int
	go func() {
		var err error
		count, err = n.Capture(ctx, "h1", "eth0", f, CaptureOptions{Duration: 600 * time.Millisecond})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	for i := range 2 {
		if _, err := n.Ping(ctx, "h1", n.Topology.Node("h2").IP, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.Close()
	if count < 4 {
		t.Fatalf("captured %d frames, want at least 4", count)
	}
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ng, err := pcapgo.NewNgReader(r, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []pcapgo.NgEpbFlag
	for {
		data, _, opts, err := ng.ReadPacketDataWithOptions()
		if err != nil {
			break
		}
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		icmp, _ := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
		if icmp == nil {
			continue // e.g. IGMP of the bridge
		}
		if opts.Flags == nil {
			t.Fatalf("captured frame %d: %v, flags %v", len(dirs), p, opts.Flags)
		}
		// Requests leave h1, replies arrive.
		want := pcapgo.NgEpbFlagDirectionOutbound
		if icmp.TypeCode.Type() == layers.ICMPv4TypeEchoReply {
			want = pcapgo.NgEpbFlagDirectionInbound
		}
		if opts.Flags.Direction != want {
			t.Errorf("frame %d (%v): direction %v, want %v", len(dirs), icmp.TypeCode, opts.Flags.Direction, want)
		}
		dirs = append(dirs, opts.Flags.Direction)
	}
	if len(dirs) != 4 {
		t.Errorf("read back %d frames", len(dirs))
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Log("tshark not installed: pcapng checked with gopacket only")
		return
	}
	out, err := testproc.Command(t, tshark, "-r", path, "-Y", "icmp", "-T", "fields", "-e", "icmp.type").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 4 || got[0] != "8" || got[1] != "0" {
		t.Errorf("tshark read ICMP types %q, want 8 0 8 0", got)
	}
}
