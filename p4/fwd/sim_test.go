package fwd_test

import (
	"net/netip"
	"testing"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// TestECMP: on the simulation, flows from one leaf to another spread over
// both spines, and one flow always takes the same path.
func TestECMP(t *testing.T) {
	top, err := topologies.Open("leafspine")
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New()
	n, err := sim.NewNetwork(s, top, sim.Options{Pipeline: fwd.SimPipeline})
	if err != nil {
		t.Fatal(err)
	}
	var rx int
	n.Attach("h16", 80, emulator.AgentFunc{OnRecv: func(emulator.Addr, []byte) { rx++ }})
	dst := netip.AddrPortFrom(top.Node("h16").IP, 80)
	const flows, perFlow = 200, 5
	for port := uint16(1000); port < 1000+flows; port++ {
		n.Attach("h1", port, emulator.AgentFunc{OnStart: func(env emulator.Env) {
			for range perFlow {
				env.Send(dst, make([]byte, 100))
			}
		}})
	}
	s.Run()
	up1, _ := n.Stats("leaf1", 5)
	up2, _ := n.Stats("leaf1", 6)
	if up1.TxPackets+up2.TxPackets != flows*perFlow || rx != flows*perFlow {
		t.Fatalf("uplinks carried %d + %d, delivered %d", up1.TxPackets, up2.TxPackets, rx)
	}
	if up1.TxPackets%perFlow != 0 || up2.TxPackets%perFlow != 0 {
		t.Errorf("a flow was split across paths: %d / %d", up1.TxPackets, up2.TxPackets)
	}
	share := float64(up1.TxPackets) / float64(flows*perFlow)
	if share < 0.35 || share > 0.65 {
		t.Errorf("uplink 1 carried %.0f%% of the flows", 100*share)
	}
}
