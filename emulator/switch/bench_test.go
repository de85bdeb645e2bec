//go:build linux && !nonetns

package goswitch

import (
	"context"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// BenchmarkSwitchVsBridge measures packets per second from one host to
// another through the Go switch and, between the same namespaces and veths
// in the same run, through a Linux bridge (the kernel's own forwarding):
// UDP datagrams with 256-byte payloads, sent as fast as a batched socket
// allows, counted as frames arriving at the receiver's interface. It
// reports both rates and their ratio (switch_vs_bridge).
func BenchmarkSwitchVsBridge(b *testing.B) {
	needRoot(b)
	top := topo(b, topologies.Params{Generate: "star", Hosts: 2, Rate: 100 * units.Gbps})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := netns.Up(ctx, top, netns.Options{NoShaping: true, RunID: netns.TestRunID(testPrefix)})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Down()
	// Each iteration measures A B B A (switch, bridge, bridge, switch),
	// so drift in the machine's load falls on both alike.
	const window = time.Second
	var swPPS, brPPS float64
	goSwitch := func() float64 {
		f, err := StartFabric(n, registry(b), FabricOptions{})
		if err != nil {
			b.Fatal(err)
		}
		pps := blast(b, n, "h1", "h2", 256, window)
		st, _ := f.Switches["tor"].Stats(ctx)
		if err := f.Stop(); err != nil {
			b.Fatal(err)
		}
		b.Logf("Go switch %.0f pps; port 1 received %d, kernel dropped %d (switch behind); port 2 sent %d",
			pps, st.Ports[1].RxPackets, st.Ports[1].RxKernelDrops, st.Ports[2].TxPackets)
		return pps
	}
	bridge := func() float64 {
		if err := n.BridgeSwitches(); err != nil {
			b.Fatal(err)
		}
		pps := blast(b, n, "h1", "h2", 256, window)
		if err := n.UnbridgeSwitches(); err != nil {
			b.Fatal(err)
		}
		b.Logf("bridge %.0f pps", pps)
		return pps
	}
	for range b.N {
		swPPS += goSwitch()
		brPPS += bridge() + bridge()
		swPPS += goSwitch()
	}
	swPPS /= 2
	brPPS /= 2
	swPPS /= float64(b.N)
	brPPS /= float64(b.N)
	b.ReportMetric(swPPS, "switch_pps")
	b.ReportMetric(brPPS, "bridge_pps")
	b.ReportMetric(swPPS/brPPS, "switch_vs_bridge")
	b.ReportMetric(0, "ns/op")
}

// blast is n.Blast, failing the benchmark on error.
func blast(b *testing.B, n *netns.Network, from, to string, size int, d time.Duration) float64 {
	b.Helper()
	pps, err := n.Blast(context.Background(), from, to, size, d)
	if err != nil {
		b.Fatal(err)
	}
	return pps
}

// BenchmarkRateThroughSwitch floods a 400 Mbit/s link through the Go switch
// (HTB on the sending host, the switch's pacer on its egress) and reports
// the rate achieved as a fraction of the link's.
func BenchmarkRateThroughSwitch(b *testing.B) {
	needRoot(b)
	const rate = 400 * units.Mbps
	n, _ := bringUp(b, topo(b, topologies.Params{Generate: "star", Hosts: 2, Rate: rate}), netns.Options{})
	var got float64
	for range b.N {
		got += udpFlood(b, n, "h1", "h2", 1400, time.Second)
	}
	got /= float64(b.N)
	b.ReportMetric(got/1e6, "Mbit/s")
	b.ReportMetric(got/float64(rate), "fraction_of_rate")
	b.ReportMetric(0, "ns/op")
}
