package ina

import (
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// ProgramName is the program's name: its P4Info's pkg_info.name.
const ProgramName = "ina"

// SwitchProgram returns in-network aggregation as the substrates load it:
// ina.p4's P4Info and source (the default configuration: DefaultK values
// per packet), New over the plain forwarding pipeline with the switch's
// routes and as many aggregators as the topology gives the switch, and the
// routes written through the controller for bmv2.
func SwitchProgram() (dataplane.Program, error) {
	info, err := P4Info(Config{})
	if err != nil {
		return dataplane.Program{}, err
	}
	src, _ := p4.Source(ProgramName) // built in; p4's tests check every program has its source
	return dataplane.Program{Name: ProgramName, P4Info: info, Source: src,
		New: func(sw *topologies.Node, routes topologies.RouteTable) (dataplane.Dataplane, error) {
			p, err := New(Config{Aggregators: sw.Aggregators}, fwd.New(sw, routes))
			if err != nil {
				return nil, err
			}
			return p, nil
		},
		Entries: func(top *topologies.Topology, sw *topologies.Node, c p4rt.Client) ([]*p4v1.Update, error) {
			ctl, err := NewController(c)
			if err != nil {
				return nil, err
			}
			return ctl.RouteUpdates(top, sw.Name)
		}}, nil
}
