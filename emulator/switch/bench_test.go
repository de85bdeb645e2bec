//go:build linux && !nonetns

package goswitch

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// BenchmarkSwitchVsBridge measures packets per second from one host to
// another of a star through the Go switch and through a Linux bridge (the
// kernel's own forwarding), on copies of the network up at the same time,
// in alternating windows of the same run (see BridgeBench): UDP datagrams
// in Ethernet frames of 64, 256 and 1500 bytes (headers included), sent as
// fast as a batched socket allows, counted as frames arriving at the
// receiver's interface. The Go switch runs with AF_PACKET ring ports (the
// default) and with AF_XDP ports. Each sub-benchmark reports the rates,
// the ratios switch_vs_bridge (AF_PACKET) and xdp_vs_bridge, and CPU time
// per packet (BridgeComparison.Report).
func BenchmarkSwitchVsBridge(b *testing.B) {
	needRoot(b)
	top := topo(b, topologies.Params{Generate: "star", Hosts: 2, Rate: 100 * units.Gbps})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bench, err := NewBridgeBench(ctx, top, netns.Options{NoShaping: true}, func() string { return netns.TestRunID(testPrefix) }, registry(b), FabricOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer bench.Close()
	dst := netip.AddrPortFrom(top.Node("h2").IP, 9000)
	for _, size := range []int{64, 256, 1500} {
		b.Run(fmt.Sprintf("frame=%d", size), func(b *testing.B) {
			payload := make([]byte, size-42) // Ethernet, IPv4 and UDP headers
			c, err := bench.Compare(4*b.N, func(_ string, n *netns.Network) (netns.BlastResult, error) {
				return n.Blast(ctx, netns.BlastOptions{From: "h1", Dst: dst, Payloads: [][]byte{payload}, Warmup: 100 * time.Millisecond, Duration: 300 * time.Millisecond})
			})
			if err != nil {
				b.Fatal(err)
			}
			c.Report(b)
		})
	}
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
