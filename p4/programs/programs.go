// Package programs lists the data planes tracebed ships — plain forwarding,
// in-network aggregation (SwitchML and ATP modes; FreeINA's RDMA
// aggregation) and far-memory scheduling — in the form the Go switch and
// the testbeds load them (dataplane.Program: a name, the P4Info, the P4
// source and a constructor). cmd/tracebed assembles the binary's registry
// from it; the engine (emulator/...) is handed the registry and knows none
// of the programs.
package programs

import (
	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/p4/freeina"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/p4/ina"
)

// Registry returns the data planes a switch can run, selected with
// 'tracebed switch --program NAME', by a controller's
// SetForwardingPipelineConfig with the program's P4Info, or by a testbed's
// configuration. Plain forwarding comes first: it is the default. A new
// pipeline of p4/ is added here: its name (= P4Info pkg_info.name), its
// P4Info, its source and a constructor. Each call returns a new registry.
func Registry() (*dataplane.Registry, error) {
	inaProg, err := ina.SwitchProgram()
	if err != nil {
		return nil, err
	}
	freeProg, err := freeina.SwitchProgram()
	if err != nil {
		return nil, err
	}
	return dataplane.NewRegistry(fwd.SwitchProgram(), inaProg, farmem.SwitchProgram(), freeProg)
}
