package freeina

import (
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/p4"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// SwitchProgram returns FreeINA's RDMA aggregation as the substrates load
// it: freeina.p4's P4Info and source (the default configuration), and New
// over the plain forwarding pipeline with the switch's routes and as many
// slots as the topology's aggregators hold at DefaultK values a slot.
func SwitchProgram() (dataplane.Program, error) {
	info, err := P4Info(Config{})
	if err != nil {
		return dataplane.Program{}, err
	}
	src, _ := p4.Source(ProgramName) // built in; p4's tests check every program has its source
	return dataplane.Program{Name: ProgramName, P4Info: info, Source: src,
		New: func(sw *topologies.Node, routes topologies.RouteTable) (dataplane.Dataplane, error) {
			p, err := New(Config{Slots: SlotsFor(sw.Aggregators, DefaultK)}, fwd.New(sw, routes))
			if err != nil {
				return nil, err
			}
			return p, nil
		}}, nil
}
