//go:build linux && !nonetns

package ina

import (
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/p4rt"
	goswitch "github.com/tracebed/tracebed/emulator/switch"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// netnsPrefix starts the run ids of this test binary (see
// netns.RunTests).
var netnsPrefix = "q" + netns.NewRunID()[:2]

// TestMain checks, after the suite, that the root benchmarks left no
// namespace, link or process behind.
func TestMain(m *testing.M) { os.Exit(netns.RunTests(m, netnsPrefix)) }

// BenchmarkINASwitchVsBridge measures INA packets through the Go switch
// running the ina pipeline against a Linux bridge forwarding the same
// frames, on copies of a 2-host star up at the same time, in alternating
// windows of one run (goswitch.BridgeBench). A one-worker job in pool mode
// (k = 64) sends data packets as fast as a batched socket allows, cycling
// through two versions of 512 slots as SwitchML's workers do: each packet
// completes its aggregator, and the switch sends the result back to the
// worker. The switch's rate is that of results arriving at the worker; the
// bridge's, that of the same frames (342 bytes) from one host to the other.
// It reports the rates and ratios of BridgeComparison.Report.
func BenchmarkINASwitchVsBridge(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("skipping: network namespaces need root (CI runs as root)")
	}
	f, err := topologies.Generate(topologies.Params{Generate: "star", Name: "inabench", Hosts: 2, Rate: 100 * units.Gbps, Aggregators: 8192})
	if err != nil {
		b.Fatal(err)
	}
	top, err := f.Build("inabench")
	if err != nil {
		b.Fatal(err)
	}
	prog, err := SwitchProgram()
	if err != nil {
		b.Fatal(err)
	}
	reg, err := dataplane.NewRegistry(fwd.SwitchProgram(), prog)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bench, err := goswitch.NewBridgeBench(ctx, top, netns.Options{NoShaping: true}, func() string { return netns.TestRunID(netnsPrefix) },
		reg, goswitch.FabricOptions{Program: ProgramName})
	if err != nil {
		b.Fatal(err)
	}
	defer bench.Close()

	const slots = 512
	worker := netip.AddrPortFrom(top.Node("h1").IP, 40000)
	ctls := map[string]*Controller{}
	for _, fw := range []string{goswitch.ForwardXDP, goswitch.ForwardPacket} {
		n := bench.Network(fw)
		c, err := p4rt.Dial(ctx, goswitch.SocketPath(n, "tor"), p4rt.DialOptions{DeviceID: goswitch.DefaultDeviceID})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctl, err := NewController(c)
		if err != nil {
			b.Fatal(err)
		}
		ctls[fw] = ctl
		members, err := Members(top, "tor", []netip.AddrPort{worker})
		if err != nil {
			b.Fatal(err)
		}
		if err := ctl.SetGroup(ctx, 1, members); err != nil {
			b.Fatal(err)
		}
		if err := ctl.Bind(ctx, Binding{Job: 1, ToRound: MaxRound, Mode: ModePool, Gen: 1, Size: slots, Workers: 1, Group: 1}); err != nil {
			b.Fatal(err)
		}
	}
	// Two versions of every slot, in the order a worker uses them.
	vals := make([]int32, DefaultK)
	for i := range vals {
		vals[i] = int32(i)
	}
	var payloads [][]byte
	for chunk := range 2 * slots {
		h := Header{Flags: FlagData, Job: 1, Slot: uint16(chunk % slots), Ver: uint8(chunk / slots), Workers: 1,
			Offset: uint32(chunk * DefaultK), Bitmap: 1}
		payloads = append(payloads, Append(nil, h, vals))
	}
	b.Logf("INA frames of %d bytes", 42+len(payloads[0]))
	c, err := bench.Compare(4*b.N, func(fw string, n *netns.Network) (netns.BlastResult, error) {
		o := netns.BlastOptions{From: "h1", SrcPort: int(worker.Port()), Payloads: payloads, Warmup: 100 * time.Millisecond, Duration: 300 * time.Millisecond}
		if fw == goswitch.ForwardBridge {
			o.Dst = netip.AddrPortFrom(top.Node("h2").IP, 9000)
		} else {
			o.Dst, o.CountAt = netip.AddrPortFrom(top.Node("tor").IP, Port), "h1"
		}
		return n.Blast(ctx, o)
	})
	if err != nil {
		b.Fatal(err)
	}
	// Every data packet the switch took completed its aggregator and sent
	// one result back. The counters are read once the switch has drained
	// the frames still queued when the last window ended (two reads
	// alike): read before, its packets and results are read at different
	// moments of the drain.
	for fw, ctl := range ctls {
		var jc JobCounters
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			prev := jc
			if jc, err = ctl.Counters(ctx, 1); err != nil {
				b.Fatal(err)
			}
			if jc == prev || time.Now().After(deadline) {
				break
			}
		}
		if jc.Packets == 0 || jc.Results != jc.Packets || jc.Drops != [NumJobDrops]uint64{} {
			b.Errorf("%s: %d data packets, %d results, drops %v", fw, jc.Packets, jc.Results, jc.Drops)
		}
	}
	c.Report(b)
}
