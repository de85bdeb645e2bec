//go:build linux && !nonetns

package goswitch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/topologies"
)

// Forwarders compared by CompareWithBridge.
const (
	ForwardXDP    = "xdp"      // Go switches with AF_XDP ports
	ForwardPacket = "afpacket" // Go switches with AF_PACKET ports (the default)
	ForwardBridge = "bridge"   // Linux bridges
)

// BridgeComparison holds the samples of CompareWithBridge.
type BridgeComparison struct {
	Samples []Sample // in the order taken
}

// Sample is one measurement of a BridgeComparison.
type Sample struct {
	Forwarder string // ForwardXDP, ForwardPacket or ForwardBridge
	netns.BlastResult
	// Switch is the first switch's counters over the measurement (the
	// difference of two Stats; zero for a bridge): its frames, and the
	// CPU time of its data-plane thread.
	Switch Stats
}

// SwitchFrames returns the frames the switch sent during the sample.
func (s Sample) SwitchFrames() uint64 {
	var n uint64
	for _, p := range s.Switch.Ports {
		n += p.TxPackets
	}
	return n
}

// PPS returns the mean packet rate of forwarder's samples.
func (c BridgeComparison) PPS(forwarder string) float64 {
	var sum float64
	var n int
	for _, s := range c.Samples {
		if s.Forwarder == forwarder {
			sum += s.PPS()
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// CPUPerPacket returns the CPU time per packet of forwarder's samples: of
// the sending thread, and of the switch's data-plane thread (zero for the
// bridge, whose forwarding runs in the sender's system calls).
func (c BridgeComparison) CPUPerPacket(forwarder string) (sender, sw time.Duration) {
	var sCPU, wCPU time.Duration
	var sN, wN uint64
	for _, s := range c.Samples {
		if s.Forwarder == forwarder {
			sCPU += s.SenderCPU
			sN += s.Frames
			wCPU += s.Switch.CPU
			wN += s.SwitchFrames()
		}
	}
	if sN > 0 {
		sender = sCPU / time.Duration(sN)
	}
	if wN > 0 {
		sw = wCPU / time.Duration(wN)
	}
	return sender, sw
}

// BridgeBench is three copies of one topology up at the same time in
// network namespaces: one forwarding with Go switches with AF_XDP ports,
// one with Go switches with AF_PACKET ports, one with Linux bridges (the
// kernel's own forwarding). Compare measures a path on each in turn, in
// short alternating windows, so that the machine's load, which drifts by
// the second on a shared machine, falls on all three alike; the switches
// of the copies not being measured sleep.
type BridgeBench struct {
	nets    map[string]*netns.Network
	fabrics map[string]*Fabric
}

// Forwarders are the forwarders of a BridgeBench, in the order Compare
// measures them.
var Forwarders = []string{ForwardXDP, ForwardPacket, ForwardBridge}

// NewBridgeBench brings up the three copies of top (opts with Bridge set
// for the bridged copy, each with a run id from runID) and starts Go
// switches on two of them (StartFabric with fabric, its IO set per copy).
// AF_XDP is required: it fails where the ports cannot have it. On error it
// tears down what it brought up.
func NewBridgeBench(ctx context.Context, top *topologies.Topology, opts netns.Options, runID func() string, programs *dataplane.Registry, fabric FabricOptions) (_ *BridgeBench, err error) {
	b := &BridgeBench{nets: map[string]*netns.Network{}, fabrics: map[string]*Fabric{}}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	for _, fw := range Forwarders {
		o := opts
		o.RunID = runID()
		o.Bridge = fw == ForwardBridge
		n, err := netns.Up(ctx, top, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fw, err)
		}
		b.nets[fw] = n
		if o.Bridge {
			continue
		}
		fo := fabric
		fo.IO = IOMode(fw)
		f, err := StartFabric(n, programs, fo)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fw, err)
		}
		b.fabrics[fw] = f
	}
	return b, nil
}

// Network returns the copy of forwarder fw.
func (b *BridgeBench) Network(fw string) *netns.Network { return b.nets[fw] }

// Fabric returns the Go switches of forwarder fw's copy (nil for the
// bridges).
func (b *BridgeBench) Fabric(fw string) *Fabric { return b.fabrics[fw] }

// Close stops the switches and tears the copies down.
func (b *BridgeBench) Close() error {
	var errs []error
	for _, f := range b.fabrics {
		errs = append(errs, f.Stop())
	}
	for _, n := range b.nets {
		errs = append(errs, n.Down())
	}
	b.fabrics, b.nets = nil, nil
	return errors.Join(errs...)
}

// Compare measures a path rounds times on each copy, each round in the
// order AF_XDP, AF_PACKET, bridge, bridge, AF_PACKET, AF_XDP, with
// measure (netns.Network.Blast, typically with a short window). For the
// switch copies it also takes the first switch's counters over each
// measurement.
func (b *BridgeBench) Compare(rounds int, measure func(fw string, n *netns.Network) (netns.BlastResult, error)) (BridgeComparison, error) {
	var c BridgeComparison
	ctx := context.Background()
	order := []string{ForwardXDP, ForwardPacket, ForwardBridge, ForwardBridge, ForwardPacket, ForwardXDP}
	for range rounds {
		for _, fw := range order {
			n := b.nets[fw]
			s := Sample{Forwarder: fw}
			var sw *Switch
			var before Stats
			var err error
			if f := b.fabrics[fw]; f != nil {
				sw = f.Switches[n.Topology.Switches()[0].Name]
				if before, err = sw.Stats(ctx); err != nil {
					return c, fmt.Errorf("%s: %w", fw, err)
				}
			}
			if s.BlastResult, err = measure(fw, n); err != nil {
				return c, fmt.Errorf("%s: %w", fw, err)
			}
			if sw != nil {
				after, err := sw.Stats(ctx)
				if err != nil {
					return c, fmt.Errorf("%s: %w", fw, err)
				}
				s.Switch = after.Sub(before)
			}
			c.Samples = append(c.Samples, s)
		}
	}
	return c, nil
}

// MetricReporter is what Report writes to: a *testing.B.
type MetricReporter interface {
	ReportMetric(n float64, unit string)
	Logf(format string, args ...any)
}

// Report logs the samples of c and reports as benchmark metrics the packet
// rates (switch_pps for the Go switch with its default port I/O, AF_PACKET
// rings; xdp_pps with AF_XDP; bridge_pps), the ratios to the bridge
// (switch_vs_bridge, xdp_vs_bridge), and the CPU nanoseconds per packet
// delivered: of the sending thread (sender_ns/pkt, xdp_sender_ns/pkt;
// bridge_ns/pkt, the bridge's whole path, which runs in the sender's
// system calls), of the switch's thread (switch_ns/pkt, xdp_switch_ns/pkt)
// and both together (total_ns/pkt, xdp_total_ns/pkt): what the path costs
// the machine, steadier than the rates when other work shares the cores.
func (c BridgeComparison) Report(b MetricReporter) {
	for _, s := range c.Samples {
		line := fmt.Sprintf("%-8s %9.0f pps, sender %4.0f ns/pkt", s.Forwarder, s.PPS(), perPkt(s.SenderCPU, s.Frames))
		if s.Forwarder != ForwardBridge {
			var drops uint64
			for _, p := range s.Switch.Ports {
				drops += p.RxKernelDrops
			}
			line += fmt.Sprintf("; switch %4.0f ns/pkt, sent %d, kernel dropped %d (switch behind), %d polls",
				perPkt(s.Switch.CPU, s.SwitchFrames()), s.SwitchFrames(), drops, s.Switch.Wakeups)
		}
		b.Logf("%s", line)
	}
	pkt, xdp, br := c.PPS(ForwardPacket), c.PPS(ForwardXDP), c.PPS(ForwardBridge)
	b.ReportMetric(pkt, "switch_pps")
	b.ReportMetric(xdp, "xdp_pps")
	b.ReportMetric(br, "bridge_pps")
	b.ReportMetric(pkt/br, "switch_vs_bridge")
	b.ReportMetric(xdp/br, "xdp_vs_bridge")
	sender, swCPU := c.CPUPerPacket(ForwardPacket)
	xdpSender, xdpSw := c.CPUPerPacket(ForwardXDP)
	bridge, _ := c.CPUPerPacket(ForwardBridge)
	b.ReportMetric(float64(sender), "sender_ns/pkt")
	b.ReportMetric(float64(swCPU), "switch_ns/pkt")
	b.ReportMetric(float64(sender+swCPU), "total_ns/pkt")
	b.ReportMetric(float64(xdpSender), "xdp_sender_ns/pkt")
	b.ReportMetric(float64(xdpSw), "xdp_switch_ns/pkt")
	b.ReportMetric(float64(xdpSender+xdpSw), "xdp_total_ns/pkt")
	b.ReportMetric(float64(bridge), "bridge_ns/pkt")
	b.ReportMetric(0, "ns/op")
}

func perPkt(cpu time.Duration, frames uint64) float64 {
	if frames == 0 {
		return 0
	}
	return float64(cpu) / float64(frames)
}
