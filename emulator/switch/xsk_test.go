//go:build linux && !nonetns

package goswitch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// TestParseIOMode: the modes by name, "" as auto, anything else refused.
func TestParseIOMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want IOMode
		err  bool
	}{{"", IOAuto, false}, {"auto", IOAuto, false}, {"xdp", IOXDP, false}, {"afpacket", IOPacket, false}, {"XDP", "", true}, {"tpacket", "", true}} {
		got, err := ParseIOMode(tc.in)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("ParseIOMode(%q) = %q, %v", tc.in, got, err)
		}
	}
}

// upOneLink brings up a star of one host with the given MTU, no switch:
// the test drives the switch's end of the link (tor's eth1) itself.
func upOneLink(t *testing.T, mtu int) *netns.Network {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := netns.Up(ctx, topo(t, topologies.Params{Generate: "star", Hosts: 1, Rate: units.Gbps}), netns.Options{NoShaping: true, MTU: mtu, RunID: netns.TestRunID(testPrefix)})
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

// testFrame is a frame of n bytes from the host's MAC with an EtherType
// of local experiments (no stack takes it), numbered i, the rest random.
func testFrame(rng *rand.Rand, n, i int) []byte {
	f := make([]byte, n)
	for j := range f {
		f[j] = byte(rng.Uint32())
	}
	f[0] = 0x02                  // a locally administered unicast destination
	f[12], f[13] = 0x88, 0xb5    // EtherType: local experimental
	f[14], f[15] = byte(i), 0x5a // number and mark
	return f
}

// collect reads frames from io until want of them carry the test's mark,
// or 5 s pass.
func collect(t *testing.T, io PortIO, want int) [][]byte {
	t.Helper()
	bufs := make([][]byte, Batch)
	lens := make([]int, Batch)
	for i := range bufs {
		bufs[i] = make([]byte, 10000)
	}
	var got [][]byte
	for deadline := time.Now().Add(5 * time.Second); len(got) < want && time.Now().Before(deadline); {
		n, err := io.Recv(bufs, lens)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			f := bufs[i][:min(lens[i], len(bufs[i]))]
			if len(f) > 15 && f[12] == 0x88 && f[13] == 0xb5 && f[15] == 0x5a {
				got = append(got, bytes.Clone(f))
			}
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return got
}

// TestPortIO: frames of every size from the minimum to the jumbo MTU
// (several AF_XDP chunks each) cross a switch port intact in both
// directions, with AF_XDP and with an AF_PACKET ring; closing an AF_XDP
// port detaches its XDP program.
func TestPortIO(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name string
		open func(iface string, maxFrame int) (PortIO, error)
	}{
		{"xdp", OpenXDP},
		{"ring", func(iface string, maxFrame int) (PortIO, error) { return OpenPacketRing(iface, Batch, maxFrame) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := upOneLink(t, 9000)
			var sw, host PortIO
			if err := n.Do("tor", func() (err error) { sw, err = tc.open("eth1", 9000+frameOverhead); return }); err != nil {
				if tc.name == "xdp" {
					t.Skipf("skipping: no AF_XDP on this kernel: %v", err)
				}
				t.Fatal(err)
			}
			defer func() {
				if sw != nil {
					sw.Close()
				}
			}()
			if err := n.Do("h1", func() (err error) { host, err = OpenAFPacket("eth0", Batch); return }); err != nil {
				t.Fatal(err)
			}
			defer host.Close()
			exchange(t, host, sw, []int{60, 64, 256, 1514, 2047, 2048, 2049, 4096, 6000, 9014})
			if err := sw.Close(); err != nil {
				t.Error(err)
			}
			sw = nil
			if attached := xdpAttached(t, n, "tor", "eth1"); attached {
				t.Error("an XDP program is still attached to tor's eth1 after Close")
			}
		})
	}
}

// exchange sends frames of the given sizes from host to sw and back, and
// checks that each side receives them all, intact and in order.
func exchange(t *testing.T, host, sw PortIO, sizes []int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var frames [][]byte
	for i, size := range sizes {
		frames = append(frames, testFrame(rng, size, i))
	}
	for _, dir := range []struct {
		name     string
		from, to PortIO
	}{{"host to switch", host, sw}, {"switch to host", sw, host}} {
		sent, err := dir.from.Send(frames)
		if err != nil || sent != len(frames) {
			t.Fatalf("%s: sent %d of %d: %v", dir.name, sent, len(frames), err)
		}
		got := collect(t, dir.to, len(frames))
		if len(got) != len(frames) {
			t.Fatalf("%s: received %d of %d frames", dir.name, len(got), len(frames))
		}
		for i, f := range got {
			if !bytes.Equal(f, frames[i]) {
				t.Errorf("%s: frame %d (%d bytes): received %d bytes, not the frame sent", dir.name, i, len(frames[i]), len(f))
			}
		}
	}
}

// TestPacketRing: an AF_PACKET ring port receives frames in order across
// several turns of its ring (read while they arrive), and a frame longer
// than its slots is reported with its real length, truncated.
func TestPacketRing(t *testing.T) {
	needRoot(t)
	n := upOneLink(t, 9000)
	var sw, host PortIO
	if err := n.Do("tor", func() (err error) { sw, err = OpenPacketRing("eth1", Batch, BufSize); return }); err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	if err := n.Do("h1", func() (err error) { host, err = OpenAFPacket("eth0", Batch); return }); err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	r := sw.(*ringSocket)
	if r.capacity() < BufSize || r.frames*r.frameSize != ringBytes {
		t.Fatalf("ring of %d slots of %d bytes (frames of up to %d)", r.frames, r.frameSize, r.capacity())
	}
	rng := rand.New(rand.NewPCG(3, 4))
	bufs := make([][]byte, Batch)
	lens := make([]int, Batch)
	for i := range bufs {
		bufs[i] = make([]byte, 10000)
	}
	total := 3 * r.frames
	size := func(i int) int { return 60 + i%1400 }
	next := 0 // the number the next frame received must carry
	read := func() int {
		m, err := sw.Recv(bufs, lens)
		if err != nil {
			t.Fatal(err)
		}
		for j := range m {
			f := bufs[j][:min(lens[j], len(bufs[j]))]
			if len(f) < 18 || f[12] != 0x88 || f[13] != 0xb5 || f[15] != 0x5a {
				continue // not the test's (IPv6 neighbour discovery, ...)
			}
			if got := int(f[16])<<8 | int(f[17]); got != next || lens[j] != size(next) {
				t.Fatalf("received frame %d of %d bytes, want frame %d of %d", got, lens[j], next, size(next))
			}
			next++
		}
		return m
	}
	for sent := 0; sent < total; {
		var batch [][]byte
		for i := sent; i < min(sent+Batch, total); i++ {
			f := testFrame(rng, size(i), i)
			f[16], f[17] = byte(i>>8), byte(i)
			batch = append(batch, f)
		}
		k, err := host.Send(batch)
		if err != nil {
			t.Fatal(err)
		}
		sent += k
		for read() > 0 {
		}
	}
	for deadline := time.Now().Add(5 * time.Second); next < total && time.Now().Before(deadline); {
		if read() == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if next != total {
		t.Fatalf("received %d of %d frames", next, total)
	}
	// Into a buffer that would hold it: dropped and counted, not
	// truncated silently; the frame after it arrives.
	long := testFrame(rng, r.capacity()+1000, 0)
	after := testFrame(rng, 60, 1)
	r.KernelDrops()
	if k, err := host.Send([][]byte{long, after}); k != 2 || err != nil {
		t.Fatalf("sending %d and %d bytes: %d, %v", len(long), len(after), k, err)
	}
	if got := collect(t, sw, 1); len(got) != 1 || !bytes.Equal(got[0], after) {
		t.Fatalf("a frame of %d bytes cut short to %d by its slot, then one of %d: received %d frames, want the second alone", len(long), r.capacity(), len(after), len(got))
	}
	if d := r.KernelDrops(); d != 1 {
		t.Errorf("%d drops counted, want 1 (the long frame)", d)
	}
	// Into a shorter buffer: truncated, reported with its length.
	if k, err := host.Send([][]byte{long}); k != 1 || err != nil {
		t.Fatalf("sending %d bytes: %d, %v", len(long), k, err)
	}
	short := make([][]byte, 1)
	short[0] = make([]byte, 1000)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		m, err := sw.Recv(short, lens)
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("the long frame did not arrive: %v", err)
		}
		if m == 1 && short[0][15] == 0x5a {
			if lens[0] != len(long) || !bytes.Equal(short[0], long[:1000]) {
				t.Errorf("long frame into a 1000-byte buffer: length %d, want %d, and its first 1000 bytes", lens[0], len(long))
			}
			break
		}
	}
	// Last (its carrier comes back later): the interface down and up;
	// poll reports the error once, until an empty Recv clears it (else
	// the switch's loop would spin).
	h, err := n.Handle("tor")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	l, err := h.LinkByName("eth1")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	pollErr := func() bool {
		fds := []unix.PollFd{{Fd: int32(sw.FD()), Events: unix.POLLIN}}
		unix.Poll(fds, 0)
		return fds[0].Revents&unix.POLLERR != 0
	}
	if !pollErr() {
		t.Log("no error polled after the interface went down and up")
	}
	for read() > 0 {
	}
	if pollErr() {
		t.Error("poll still reports an error after Recv")
	}
}

// xdpAttached reports whether an XDP program is attached to iface of node.
func xdpAttached(t *testing.T, n *netns.Network, node, iface string) bool {
	t.Helper()
	h, err := n.Handle(node)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	l, err := h.LinkByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	x := l.Attrs().Xdp
	return x != nil && x.Attached
}

// TestIOXDPTaken: where AF_XDP cannot be had (here: another XDP program
// holds the interface), xdp mode fails naming the port, and auto mode
// (AF_PACKET) opens it.
func TestIOXDPTaken(t *testing.T) {
	needRoot(t)
	n := upOneLink(t, 0)
	var other link.Link
	err := n.Do("tor", func() error {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "MIT",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()}})
		if err != nil {
			return err
		}
		defer prog.Close()
		ifi, err := net.InterfaceByName("eth1")
		if err != nil {
			return err
		}
		other, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifi.Index})
		return err
	})
	if err != nil {
		t.Skipf("skipping: cannot attach an XDP program: %v", err)
	}
	defer other.Close()
	err = n.Do("tor", func() error {
		io, err := openPort(IOAuto, "eth1", BufSize)
		if err != nil {
			return err
		}
		defer io.Close()
		if ioKind(io) != string(IOPacket) {
			return fmt.Errorf("auto: %s port, want afpacket", ioKind(io))
		}
		if io, err := openPort(IOXDP, "eth1", BufSize); err == nil {
			io.Close()
			return errors.New("xdp mode opened a port whose XDP hook is taken")
		} else if !bytes.Contains([]byte(err.Error()), []byte("eth1")) {
			return fmt.Errorf("xdp mode's error %q does not name the port", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIOModes: every host pair pings and exchanges a TCP stream through
// leaf and spine switches, with jumbo frames and without, through AF_XDP
// ports (switch to switch links included) and AF_PACKET ports; the
// ports are the kind asked for, and no XDP program stays attached.
func TestIOModes(t *testing.T) {
	needRoot(t)
	top := topo(t, topologies.Params{Generate: "leafspine", Spines: 2, Leaves: 2, HostsPerLeaf: 1, Rate: units.Gbps})
	for _, tc := range []struct {
		mode IOMode
		mtu  int
	}{{IOXDP, 0}, {IOXDP, 9000}, {IOPacket, 0}, {IOPacket, 9000}} {
		t.Run(fmt.Sprintf("%s/mtu=%d", tc.mode, tc.mtu), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n, err := netns.Up(ctx, top, netns.Options{MTU: tc.mtu, RunID: netns.TestRunID(testPrefix)})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := n.Down(); err != nil {
					t.Error(err)
				}
			}()
			f, err := StartFabric(n, registry(t), FabricOptions{IO: tc.mode})
			if err != nil {
				if tc.mode == IOXDP {
					t.Skipf("skipping: no AF_XDP here: %v", err)
				}
				t.Fatal(err)
			}
			stopped := false
			defer func() {
				if !stopped {
					f.Stop()
				}
			}()
			allPairs(t, n)
			for name, sw := range f.Switches {
				st, err := sw.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range st.Ports[1:] {
					if p.IO != string(tc.mode) {
						t.Errorf("%s port %d: %q, want %q", name, i+1, p.IO, tc.mode)
					}
					if p.RxOversize+p.RxErrors+p.TxErrors > 0 {
						t.Errorf("%s port %d: %+v", name, i+1, p)
					}
				}
			}
			stopped = true
			if err := f.Stop(); err != nil {
				t.Fatal(err)
			}
			for _, sw := range top.Switches() {
				for _, p := range sw.Ports {
					if xdpAttached(t, n, sw.Name, p.Iface) {
						t.Errorf("%s: an XDP program is still attached after the switch stopped", p)
					}
				}
			}
		})
	}
}

// TestCaptureXDPPort: a capture on a port of a switch receiving through
// AF_XDP records both directions: the echo requests arriving from h1 (read
// at h1's end of the link) and the replies the switch sends to h1.
func TestCaptureXDPPort(t *testing.T) {
	needRoot(t)
	ctx0, cancel0 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel0()
	n, err := netns.Up(ctx0, topo(t, topologies.Params{Generate: "star", Hosts: 2, Rate: units.Gbps}), netns.Options{RunID: netns.TestRunID(testPrefix)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Down()
	f, err := StartFabric(n, registry(t), FabricOptions{IO: IOXDP})
	if err != nil {
		t.Skipf("skipping: no AF_XDP here: %v", err)
	}
	defer f.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := n.Capture(ctx, "tor", n.Topology.Node("tor").Ports[0].Iface, &out, netns.CaptureOptions{Started: func() { close(started) }, Duration: 3 * time.Second})
		done <- err
	}()
	<-started
	const pings = 3
	for i := range pings {
		if _, err := n.Ping(ctx, "h1", n.Topology.Node("h2").IP, i); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	r, err := pcapgo.NewNgReader(&out, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	var requests, replies int
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		// Ethernet, IPv4 (20 bytes), ICMP type.
		if len(data) > 34 && data[12] == 0x08 && data[13] == 0x00 && data[23] == 1 {
			switch data[34] {
			case 8:
				requests++
			case 0:
				replies++
			}
		}
	}
	if requests != pings || replies != pings {
		t.Errorf("captured %d echo requests and %d replies at tor's port to h1, want %d of each", requests, replies, pings)
	}
}
