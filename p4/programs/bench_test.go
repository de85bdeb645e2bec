//go:build linux && !nonetns

package programs_test

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/p4rt"
	goswitch "github.com/tracebed/tracebed/emulator/switch"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/p4/programs"
	"github.com/tracebed/tracebed/topologies"
)

// The side-by-side benchmarks: the same namespaces and veths (a star of
// hosts, no shaping) switched in turn by the Linux bridge, the Go switch
// and bmv2's simple_switch_grpc attached to the veths themselves (no link
// stage), each measured in the same run. Run them as root with p4c-bm2-ss
// and simple_switch_grpc on PATH:
//
//	go test -run '^$' -bench 'Forwarding|INARate' -benchtime 1x ./p4/programs

// needBench skips a benchmark that cannot run here, saying why.
func needBench(b *testing.B) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("skipping: network namespaces need root")
	}
	if _, err := bmv2.FindTools(bmv2.Options{}); err != nil {
		b.Skipf("skipping: %s", strings.SplitN(err.Error(), "\n", 2)[0])
	}
}

// benchNet brings up a star of hosts at 100 Gbit/s without shaping,
// hosts addressed for L2 switching (as bmv2 and the bridge need; the Go
// switch forwards either way).
func benchNet(b *testing.B, hosts int) *netns.Network {
	b.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: hosts, Rate: 100 * units.Gbps, Aggregators: 1024})
	if err != nil {
		b.Fatal(err)
	}
	top, err := f.Build("bench")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := netns.Up(ctx, top, netns.Options{RunID: netns.TestRunID(prefix), NoShaping: true, L2Hosts: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := n.Down(); err != nil {
			b.Error(err)
		}
	})
	return n
}

// switchOn starts one switch of kind "go" (in this process) or "bmv2"
// on n's switch tor running prog, programs it as the testbeds do (bmv2:
// the Go twin's initial entries) and returns its P4Runtime client and
// what stops it.
func switchOn(b *testing.B, n *netns.Network, kind string, prog *dataplane.Program, compiled *bmv2.Program) (*p4rt.GRPC, func()) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sw := n.Topology.Node("tor")
	var sock string
	var stop func()
	var deviceID uint64
	switch kind {
	case "go":
		reg, err := programs.Registry()
		if err != nil {
			b.Fatal(err)
		}
		f, err := goswitch.StartFabric(n, reg, goswitch.FabricOptions{Program: prog.Name})
		if err != nil {
			b.Fatal(err)
		}
		sock, deviceID = goswitch.SocketPath(n, sw.Name), goswitch.DefaultDeviceID
		stop = func() {
			if err := f.Stop(); err != nil {
				b.Error(err)
			}
		}
	case "bmv2":
		set, err := bmv2.Start(ctx, n, bmv2.Options{DirectLinks: true, CPUPort: 510})
		if err != nil {
			b.Fatal(err)
		}
		sock, deviceID, stop = set.Procs[0].Socket, bmv2.DeviceID, set.Stop
	}
	c, err := p4rt.Dial(ctx, sock, p4rt.DialOptions{DeviceID: deviceID})
	if err != nil {
		stop()
		b.Fatal(err)
	}
	if kind == "bmv2" {
		if err := c.SetPipeline(ctx, compiled.P4Info, compiled.JSON, 1); err == nil {
			err = bmv2.Configure(ctx, c, n.Topology, sw, prog)
		}
		if err != nil {
			c.Close()
			stop()
			b.Fatal(err)
		}
	}
	return c, func() { c.Close(); stop() }
}

// compileFor compiles a registered program for bmv2.
func compileFor(b *testing.B, name string) (*dataplane.Program, *bmv2.Program) {
	b.Helper()
	reg, err := programs.Registry()
	if err != nil {
		b.Fatal(err)
	}
	prog := reg.Lookup(name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	compiled, err := bmv2.Compile(ctx, prog, bmv2.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return prog, compiled
}

// BenchmarkForwarding forwards UDP datagrams with 256-byte payloads from
// one host to another, sent as fast as a batched socket allows, through
// the Linux bridge, the Go switch running fwd and bmv2 running fwd.p4, on
// the same veths in the same run, and reports each one's packets per
// second at the receiver's interface and their ratios. Each iteration
// measures in the order bridge, Go, bmv2, bmv2, Go, bridge, so drift in
// the machine's load falls on all alike.
func BenchmarkForwarding(b *testing.B) {
	needBench(b)
	n := benchNet(b, 2)
	prog, compiled := compileFor(b, "fwd")
	const window = 2 * time.Second
	dst := netip.AddrPortFrom(n.Topology.Node("h2").IP, 9000)
	payload := make([]byte, 256)
	blast := func() float64 {
		r, err := n.Blast(context.Background(), netns.BlastOptions{From: "h1", Dst: dst, Payloads: [][]byte{payload}, Duration: window})
		if err != nil {
			b.Fatal(err)
		}
		return r.PPS()
	}
	bridge := func() float64 {
		if err := n.BridgeSwitches(); err != nil {
			b.Fatal(err)
		}
		pps := blast()
		if err := n.UnbridgeSwitches(); err != nil {
			b.Fatal(err)
		}
		b.Logf("bridge %.0f pps", pps)
		return pps
	}
	through := func(kind string) float64 {
		_, stop := switchOn(b, n, kind, prog, compiled)
		pps := blast()
		stop()
		b.Logf("%s %.0f pps", kind, pps)
		return pps
	}
	var br, gs, bm float64
	for range b.N {
		br += bridge()
		gs += through("go")
		bm += through("bmv2") + through("bmv2")
		gs += through("go")
		br += bridge()
	}
	k := float64(2 * b.N)
	br, gs, bm = br/k, gs/k, bm/k
	b.ReportMetric(br, "bridge_pps")
	b.ReportMetric(gs, "goswitch_pps")
	b.ReportMetric(bm, "bmv2_pps")
	b.ReportMetric(gs/br, "goswitch_vs_bridge")
	b.ReportMetric(bm/br, "bmv2_vs_bridge")
	b.ReportMetric(bm/gs, "bmv2_vs_goswitch")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkINARate measures the INA pipeline on the Go switch (ina) and on
// bmv2 (ina.p4), on the same veths in the same run: one worker of a
// pool-mode job streams contributions of 64 values (SwitchML's 256 bytes)
// to the switch as fast as a batched socket allows, cycling through 512
// aggregators with SwitchML's version bit, so that every packet takes the
// whole path — aggregate, complete, multicast the result back. It reports
// the frames each switch's pipeline handled per second (its own frame
// accounting, read over P4Runtime) and their ratio, measured in the order
// Go, bmv2, bmv2, Go.
func BenchmarkINARate(b *testing.B) {
	needBench(b)
	n := benchNet(b, 2)
	prog, compiled := compileFor(b, "ina")
	const window = 2 * time.Second
	rate := func(kind string) float64 {
		c, stop := switchOn(b, n, kind, prog, compiled)
		defer stop()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ctl, err := ina.NewController(c)
		if err != nil {
			b.Fatal(err)
		}
		worker := netip.AddrPortFrom(n.Topology.Node("h1").IP, 9000)
		ms, err := ina.Members(n.Topology, "tor", []netip.AddrPort{worker})
		if err == nil {
			err = ctl.SetGroup(ctx, 1, ms)
		}
		if err == nil {
			err = ctl.Bind(ctx, ina.Binding{Job: 1, ToRound: ina.MaxRound, Mode: ina.ModePool, Gen: 1, Size: 512, Workers: 1, Group: 1})
		}
		if err != nil {
			b.Fatal(err)
		}
		stopSend := streamINA(b, n, "h1", 9000, 1, 512)
		defer stopSend()
		time.Sleep(200 * time.Millisecond) // steady state
		f0, err := ctl.FrameCounts(ctx)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		time.Sleep(window)
		f1, err := ctl.FrameCounts(ctx)
		if err != nil {
			b.Fatal(err)
		}
		el := time.Since(t0).Seconds()
		jc, err := ctl.Counters(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		pps := float64(f1.Total()-f0.Total()) / el
		b.Logf("%s: %.0f frames/s through the INA pipeline; job counters %+v", kind, pps, jc)
		return pps
	}
	var gs, bm float64
	for range b.N {
		gs += rate("go")
		bm += rate("bmv2") + rate("bmv2")
		gs += rate("go")
	}
	k := float64(2 * b.N)
	gs, bm = gs/k, bm/k
	b.ReportMetric(gs, "goswitch_pps")
	b.ReportMetric(bm, "bmv2_pps")
	b.ReportMetric(bm/gs, "bmv2_vs_goswitch")
	b.ReportMetric(0, "ns/op")
}

// streamINA sends, from host from's UDP port, the contributions of worker
// 0 of a one-worker job to the switch, chunk after chunk over slots
// aggregators (slot = chunk mod slots, version = chunk / slots mod 2,
// offset = chunk × k), 64 datagrams per sendmmsg, until the returned
// function is called.
func streamINA(b *testing.B, n *netns.Network, from string, port uint16, job uint16, slots int) func() {
	b.Helper()
	var conn net.PacketConn
	host := n.Topology.Node(from)
	if err := n.Do(from, func() (err error) {
		conn, err = net.ListenPacket("udp4", netip.AddrPortFrom(host.IP, port).String())
		return
	}); err != nil {
		b.Fatal(err)
	}
	// Results come back to the worker's socket; nobody reads them (they
	// are counted by the switch as they leave).
	pc := ipv4.NewPacketConn(conn)
	to := &net.UDPAddr{IP: net.IP(n.Topology.Node("tor").IP.AsSlice()), Port: ina.Port}
	values := make([]int32, ina.DefaultK)
	for i := range values {
		values[i] = int32(i)
	}
	const batch = 64
	msgs := make([]ipv4.Message, batch)
	bufs := make([][]byte, batch)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for chunk := 0; ; {
			select {
			case <-stop:
				return
			default:
			}
			for i := range msgs {
				h := ina.Header{Flags: ina.FlagData, Job: job, Slot: uint16(chunk % slots), Ver: uint8(chunk / slots % 2),
					Workers: 1, Bitmap: 1, K: ina.DefaultK, Offset: uint32(chunk * ina.DefaultK)}
				bufs[i] = ina.Append(bufs[i][:0], h, values)
				msgs[i] = ipv4.Message{Buffers: [][]byte{bufs[i]}, Addr: to}
				chunk++
			}
			if _, err := pc.WriteBatch(msgs, 0); err != nil {
				time.Sleep(time.Millisecond) // the socket buffer is full
			}
		}
	}()
	return func() { close(stop); <-done; conn.Close() }
}
