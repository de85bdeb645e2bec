package farmem

import (
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/p4"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// SwitchProgram returns the far-memory data plane as the substrates load it:
// farmem.p4's P4Info and source, and New over the plain forwarding
// pipeline with the switch's routes.
func SwitchProgram() dataplane.Program {
	src, _ := p4.Source(ProgramName) // built in; p4's tests check every program has its source
	return dataplane.Program{Name: ProgramName, P4Info: P4Info(), Source: src,
		New: func(sw *topologies.Node, routes topologies.RouteTable) (dataplane.Dataplane, error) {
			return New(fwd.New(sw, routes)), nil
		}}
}
