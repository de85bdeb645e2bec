//go:build linux && !nonetns

package bmv2

import (
	"context"
	"errors"
	"fmt"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"github.com/vishvananda/netlink"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/emulator/p4rt"
	goswitch "github.com/tracebed/tracebed/emulator/switch"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

// Stages are the links of a network's bmv2 switches, modelled outside the
// switches: bmv2 applies no link delay, loss, duplication or reordering,
// does not pace its egress at the link's rate and this kernel has no
// netem, so every port of every switch gets an impairment stage, the Go
// switch's own port model (package goswitch) run on the port's link.
//
// For port N of a switch (interface ethN, the topology's link) the stage
// puts a veth pair inside the switch's namespace — StageIface(N), where
// simple_switch_grpc attaches as port N, and its peer — and forwards
// between ethN and the peer as a Go switch forwards between two ports: a
// frame from the link meets the link's impairments of the host's
// direction (for ports facing a host, as on the Go switch) and goes to
// bmv2 at once; a frame from bmv2 waits in the port's strict-priority
// egress queues (its DSCP class selector: the class bmv2's program chose,
// fwd.p4 and farmem.p4 set the priority from it or re-mark it), leaves at
// the link's rate with the link's drop-tail buffer, and meets the link's
// loss, duplication, reordering and delay. So a run on bmv2 sees the links
// a run on the Go switch sees; only the pipeline differs.
//
// The stages run in this process, one Go switch per bmv2 switch, each on
// a thread of its own.
type Stages struct {
	switches map[string]*goswitch.Switch
	cancel   context.CancelFunc
	done     []chan error
}

// stagePeer is the stage's side of the veth pair of port num.
func stagePeer(num int) string { return fmt.Sprintf("stg%d", num) }

// stageRate is the rate of the inner veth (stage to bmv2): far above any
// link's, so that only the topology's link paces.
const stageRate = 10 * units.Tbps

// StartStages creates the inner veth pairs of every switch of n and starts
// their impairment stages, seeded with seed. On error it removes what it
// made.
func StartStages(n *netns.Network, seed uint64) (_ *Stages, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Stages{switches: map[string]*goswitch.Switch{}, cancel: cancel}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	reg, err := dataplane.NewRegistry(wireProgram())
	if err != nil {
		return nil, err
	}
	for _, sw := range n.Topology.Switches() {
		if err := addStageLinks(n, sw); err != nil {
			return nil, fmt.Errorf("bmv2: link stage of %s: %w", sw.Name, err)
		}
		top, err := stageTopology(sw)
		if err != nil {
			return nil, fmt.Errorf("bmv2: link stage of %s: %w", sw.Name, err)
		}
		ifaces := make([]string, 2*len(sw.Ports)+1)
		for _, p := range sw.Ports {
			ifaces[p.Num] = p.Iface
			ifaces[len(sw.Ports)+p.Num] = stagePeer(p.Num)
		}
		var st *goswitch.Switch
		err = n.Do(sw.Name, func() error {
			var err error
			st, err = goswitch.New(goswitch.Config{Topology: top, Name: stageName, Programs: reg, Seed: seed ^ uint64(sw.Index)<<40,
				MaxFrame: n.MTU + 22, Open: func(p *topologies.Port) (goswitch.PortIO, error) {
					return goswitch.OpenAFPacket(ifaces[p.Num], goswitch.Batch)
				}})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("bmv2: link stage of %s: %w", sw.Name, err)
		}
		done := make(chan error, 1)
		go func() { done <- st.Run(ctx) }()
		s.switches[sw.Name] = st
		s.done = append(s.done, done)
	}
	return s, nil
}

// Stop stops every stage and waits for them. The veth pairs go with the
// switches' namespaces.
func (s *Stages) Stop() error {
	s.cancel()
	var errs []error
	for _, d := range s.done {
		errs = append(errs, <-d)
	}
	s.done = nil
	return errors.Join(errs...)
}

// Stats returns the counters of switch sw's links, by port number: the
// stage's port on the link (RxPackets: frames from the link, TxPackets:
// frames bmv2 sent onto it, QueueDrops: its egress queues, Lost and
// Duplicated: the impairments of both directions).
func (s *Stages) Stats(ctx context.Context, sw string) (map[int]goswitch.PortStats, error) {
	st := s.switches[sw]
	if st == nil {
		return nil, fmt.Errorf("bmv2: no link stage for switch %q", sw)
	}
	all, err := st.Stats(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int]goswitch.PortStats{}
	for num := 1; num <= (len(all.Ports)-1)/2; num++ {
		out[num] = all.Ports[num]
	}
	return out, nil
}

// addStageLinks makes, in sw's namespace, the veth pair of each port:
// StageIface(N) for bmv2, stagePeer(N) for the stage, at the network's MTU.
func addStageLinks(n *netns.Network, sw *topologies.Node) error {
	h, err := n.Handle(sw.Name)
	if err != nil {
		return err
	}
	defer h.Delete()
	for _, p := range sw.Ports {
		a, b := StageIface(p.Num), stagePeer(p.Num)
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a, MTU: n.MTU, TxQLen: netns.HostQueue}, PeerName: b, PeerMTU: uint32(n.MTU), PeerTxQLen: netns.HostQueue}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("veth %s/%s: %w", a, b, err)
		}
		for _, name := range []string{a, b} {
			l, err := h.LinkByName(name)
			if err != nil {
				return err
			}
			if err := h.LinkSetUp(l); err != nil {
				return fmt.Errorf("%s up: %w", name, err)
			}
		}
	}
	return nil
}

// stageName is the stage's switch in its topology.
const stageName = "stage"

// stageTopology is the topology a stage runs as a Go switch: switch
// "stage" whose ports 1..P are sw's, on links with the same attributes to
// stand-ins of the same kinds as sw's peers, and whose ports P+1..2P lead
// to switch "bmv2" on links that neither delay nor lose, far faster than
// any link of the topology.
func stageTopology(sw *topologies.Node) (*topologies.Topology, error) {
	P := len(sw.Ports)
	zero := units.Duration(0)
	one := 1
	f := &topologies.File{Name: "stage-" + sw.Name}
	f.Topology.Nodes = append(f.Topology.Nodes,
		topologies.NamedNode{Name: stageName, Spec: topologies.NodeSpec{Kind: string(topologies.Switch), Queues: &sw.Queues, Latency: &zero}},
		topologies.NamedNode{Name: "bmv2", Spec: topologies.NodeSpec{Kind: string(topologies.Switch), Queues: &one, Latency: &zero}})
	inner := stageRate
	var links []topologies.LinkSpec
	for _, p := range sw.Ports {
		l := p.Link
		peer := fmt.Sprintf("peer%d", p.Num)
		spec := topologies.NodeSpec{Kind: string(p.Peer.Node.Kind)}
		if !p.Peer.Node.IsHost() {
			spec.Queues, spec.Latency = &one, &zero
		}
		f.Topology.Nodes = append(f.Topology.Nodes, topologies.NamedNode{Name: peer, Spec: spec})
		rate, delay, buf := l.Rate, units.Duration(l.Delay), l.Buffer
		loss, dup, reorder := units.Fraction(l.Loss), units.Fraction(l.Duplicate), units.Fraction(l.Reorder)
		links = append(links, topologies.LinkSpec{Endpoints: []string{fmt.Sprintf("%s:eth%d", stageName, p.Num), peer + ":eth0"},
			LinkAttrs: topologies.LinkAttrs{Rate: &rate, Delay: &delay, Buffer: &buf, Loss: &loss, Duplicate: &dup, Reorder: &reorder}})
	}
	for _, p := range sw.Ports {
		buf := units.Bytes(64 << 20)
		links = append(links, topologies.LinkSpec{Endpoints: []string{fmt.Sprintf("%s:eth%d", stageName, P+p.Num), fmt.Sprintf("bmv2:eth%d", p.Num)},
			LinkAttrs: topologies.LinkAttrs{Rate: &inner, Delay: &zero, Buffer: &buf}})
	}
	f.Topology.Links = links
	return f.Build("(link stage of " + sw.Name + ")")
}

// The wire program forwards every frame between a link port N and its
// stage port P+N, unchanged, in the egress queue of its DSCP class
// selector; it has no P4 objects.
const wireName = "tracebed.link"

func wireProgram() dataplane.Program {
	info := &p4configv1.P4Info{PkgInfo: &p4configv1.PkgInfo{Name: wireName, Arch: "tracebed"}}
	return dataplane.Program{Name: wireName, P4Info: info,
		New: func(sw *topologies.Node, _ topologies.RouteTable) (dataplane.Dataplane, error) {
			t, err := p4rt.NewTarget(info)
			if err != nil {
				return nil, err
			}
			return &wire{Target: t, ports: len(sw.Ports) / 2}, nil
		}}
}

// wire is the wire program's data plane.
type wire struct {
	*p4rt.Target
	ports int // link ports; ports+N is link port N's stage port
}

// Process implements emulator.Pipeline.
func (w *wire) Process(_ time.Duration, in int, f []byte, out emulator.Emitter) {
	if in > w.ports {
		prio := 0
		if frame.IsIPv4(f) {
			prio = int(frame.TOS(f) >> 5)
		}
		out.Emit(in-w.ports, prio, f)
		return
	}
	out.Emit(in+w.ports, 0, f)
}
