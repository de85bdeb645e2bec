package fwd

import (
	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/p4"
	"github.com/tracebed/tracebed/topologies"
)

// ProgramName is the program's name: its P4Info's pkg_info.name.
const ProgramName = "fwd"

// SwitchProgram returns plain forwarding as the substrates load it: fwd.p4's
// P4Info and source, and New with the switch's routes.
func SwitchProgram() dataplane.Program {
	src, _ := p4.Source(ProgramName) // built in; p4's tests check every program has its source
	return dataplane.Program{Name: ProgramName, P4Info: P4Info(), Source: src,
		New: func(sw *topologies.Node, routes topologies.RouteTable) (dataplane.Dataplane, error) {
			return New(sw, routes), nil
		}}
}

// SimPipeline is plain forwarding as the simulation builds it
// (sim.Options.Pipeline): New with the switch's routes.
func SimPipeline(sw *topologies.Node, routes topologies.RouteTable) (emulator.Pipeline, error) {
	return New(sw, routes), nil
}
