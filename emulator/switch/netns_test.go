//go:build linux && !nonetns

package goswitch

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// TestMain checks, after the whole suite, that the root tests left no
// namespace, link or process behind.
func TestMain(m *testing.M) {
	os.Exit(netns.RunTests(m, testPrefix))
}

// testPrefix starts the run ids of this test binary: the package's letter
// and two random characters, so test binaries running at the same time
// (other packages, or other `go test` invocations) check and clean up only
// their own runs.
var testPrefix = "s" + netns.NewRunID()[:2]

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: network namespaces need root (CI runs as root)")
	}
}

// bringUp brings top up with a Go switch on every switch, in this process.
func bringUp(t testing.TB, top *topologies.Topology, opts netns.Options) (*netns.Network, *Fabric) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if opts.RunID == "" {
		opts.RunID = netns.TestRunID(testPrefix)
	}
	n, err := netns.Up(ctx, top, opts)
	if err != nil {
		t.Fatal(err)
	}
	f, err := StartFabric(n, registry(t), FabricOptions{})
	if err != nil {
		n.Down()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
		if err := n.Down(); err != nil {
			t.Error(err)
		}
	})
	return n, f
}

// allPairs pings every host from every other and runs a TCP transfer
// between each ordered pair.
func allPairs(t *testing.T, n *netns.Network) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hosts := n.Topology.Hosts()
	for _, a := range hosts {
		for _, b := range hosts {
			if a == b {
				continue
			}
			if _, err := n.Ping(ctx, a.Name, b.IP, 1); err != nil {
				t.Errorf("ICMP %s→%s: %v", a.Name, b.Name, err)
			}
			if err := n.TCPCheck(ctx, a.Name, b.Name, 64<<10); err != nil {
				t.Errorf("TCP %s→%s: %v", a.Name, b.Name, err)
			}
		}
	}
}

func TestStarThroughGoSwitch(t *testing.T) {
	needRoot(t)
	n, f := bringUp(t, topo(t, topologies.Params{Generate: "star", Hosts: 4, Rate: units.Gbps}), netns.Options{})
	if !n.IngressDrop {
		t.Log("the kernel refused the ingress drop filter: the switch namespace's IP stack sees every frame too")
	}
	allPairs(t, n)
	st, err := f.Switches["tor"].Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range st.Ports[1:] {
		if p.RxPackets == 0 || p.TxPackets == 0 {
			t.Errorf("port %d: rx %d tx %d", i+1, p.RxPackets, p.TxPackets)
		}
	}
}

func TestLeafSpineThroughGoSwitches(t *testing.T) {
	needRoot(t)
	top := topo(t, topologies.Params{Generate: "leafspine", Spines: 2, Leaves: 2, HostsPerLeaf: 2, Rate: units.Gbps})
	n, f := bringUp(t, top, netns.Options{})
	allPairs(t, n)
	// Cross-leaf traffic went through the spines.
	var spineTx uint64
	for _, name := range []string{"spine1", "spine2"} {
		st, err := f.Switches[name].Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.Ports {
			spineTx += p.TxPackets
		}
	}
	if spineTx == 0 {
		t.Error("no frame crossed a spine")
	}
}

// TestDelayInRTT: a link delay of d, applied by the switch on both
// directions of both host links, adds 4d to a ping through the switch.
func TestDelayInRTT(t *testing.T) {
	needRoot(t)
	const d = 5 * time.Millisecond
	rtt := func(delay time.Duration) time.Duration {
		n, _ := bringUp(t, topo(t, topologies.Params{Generate: "star", Hosts: 2, Rate: units.Gbps, Delay: units.Duration(delay)}), netns.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		best := time.Hour
		for i := range 5 {
			r, err := n.Ping(ctx, "h1", n.Topology.Node("h2").IP, i)
			if err != nil {
				t.Fatal(err)
			}
			best = min(best, r)
		}
		return best
	}
	base, delayed := rtt(0), rtt(d)
	t.Logf("RTT without delay %v, with %v per link: %v", base, d, delayed)
	if delayed-base < 4*d || delayed-base > 4*d+10*time.Millisecond {
		t.Errorf("link delay %v added %v to the RTT, want about %v", d, delayed-base, 4*d)
	}
}

// TestRateThroughGoSwitch: a UDP flood through the Go switch arrives at the
// link rate (HTB on the host, the switch's pacer on its egress) within 10%.
// Higher rates are measured by BenchmarkRateThroughSwitch: on a loaded
// 2-core machine they depend on how much CPU the switch gets.
func TestRateThroughGoSwitch(t *testing.T) {
	needRoot(t)
	const rate = 40 * units.Mbps
	n, f := bringUp(t, topo(t, topologies.Params{Generate: "star", Hosts: 2, Rate: rate}), netns.Options{})
	got := udpFlood(t, n, "h1", "h2", 1400, 1500*time.Millisecond)
	st, _ := f.Switches["tor"].Stats(context.Background())
	t.Logf("switch: %d loop rounds; ports %+v", st.Wakeups, st.Ports[1:])
	r := got / float64(rate)
	t.Logf("link %v: received %.2f Mbit/s (%.3f of the rate)", rate, got/1e6, r)
	if r < 0.9 || r > 1.1 {
		t.Errorf("received %.2f Mbit/s through a %v link", got/1e6, rate)
	}
}

// udpFlood sends UDP from one host to another as fast as a socket allows
// and returns the rate arriving at the receiver's interface, in bit/s
// (Ethernet frames, as links count them).
func udpFlood(t testing.TB, n *netns.Network, from, to string, size int, d time.Duration) float64 {
	t.Helper()
	dst := n.Topology.Node(to)
	var rx, tx net.PacketConn
	if err := n.Do(to, func() (err error) { rx, err = net.ListenPacket("udp4", dst.IP.String()+":9000"); return }); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := n.Do(from, func() (err error) { tx, err = net.ListenPacket("udp4", ":0"); return }); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	// A socket buffer of several milliseconds of traffic, so a sender the
	// loaded 2-core machine deschedules for a moment does not leave the
	// link idle (as iperf's large buffers do).
	forceSendBuffer(t, tx, 4<<20)
	go func() {
		buf := make([]byte, 2048)
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
		addr := &net.UDPAddr{IP: net.IP(dst.IP.AsSlice()), Port: 9000}
		pc := ipv4.NewPacketConn(tx)
		msgs := make([]ipv4.Message, 16)
		for i := range msgs {
			msgs[i] = ipv4.Message{Buffers: [][]byte{make([]byte, size)}, Addr: addr}
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			pc.WriteBatch(msgs, 0) // blocks while the socket buffer is full
		}
	}()
	defer func() { close(stop); <-done }()
	time.Sleep(300 * time.Millisecond)
	b0 := ifaceStats(t, n, to).RxBytes
	t0 := time.Now()
	time.Sleep(d)
	b1 := ifaceStats(t, n, to).RxBytes
	return float64(b1-b0) * 8 / time.Since(t0).Seconds()
}

type ifStats struct{ RxBytes, RxPackets uint64 }

func ifaceStats(t testing.TB, n *netns.Network, node string) ifStats {
	t.Helper()
	h, err := n.Handle(node)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	l, err := h.LinkByName(n.Topology.Node(node).Ports[0].Iface)
	if err != nil {
		t.Fatal(err)
	}
	s := l.Attrs().Statistics
	return ifStats{s.RxBytes, s.RxPackets}
}

func forceSendBuffer(t testing.TB, c net.PacketConn, size int) {
	t.Helper()
	rc, err := c.(*net.UDPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size); err != nil {
			t.Fatal(err)
		}
	})
}
