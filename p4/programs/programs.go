// Package programs lists the data planes tracebed ships — plain forwarding,
// in-network aggregation (SwitchML and ATP modes; FreeINA's RDMA
// aggregation) and far-memory scheduling — in the form the Go
// switch and the testbeds load them: a name (the P4Info's pkg_info.name), the
// P4Info, and a constructor over the plain forwarding pipeline.
package programs

import (
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/p4rt"
	goswitch "github.com/tracebed/tracebed/emulator/switch"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/p4/freeina"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
)

// Registry returns the data planes a switch can run, selected with
// 'tracebed switch --program NAME', by a controller's
// SetForwardingPipelineConfig with the program's P4Info, or by a testbed's
// configuration. A new pipeline of p4/ is added here: its name (= P4Info
// pkg_info.name), its P4Info and a constructor over the plain forwarding
// pipeline. Each call returns a new registry.
func Registry() (*goswitch.Registry, error) {
	inaInfo, err := ina.P4Info(ina.Config{})
	if err != nil {
		return nil, err
	}
	freeInfo, err := freeina.P4Info(freeina.Config{})
	if err != nil {
		return nil, err
	}
	return goswitch.NewRegistry(
		goswitch.Program{Name: "fwd", P4Info: fwd.P4Info(),
			New: func(sw *topologies.Node, base *fwd.Pipeline) (goswitch.Dataplane, error) { return base, nil }},
		goswitch.Program{Name: "ina", P4Info: inaInfo,
			New: func(sw *topologies.Node, base *fwd.Pipeline) (goswitch.Dataplane, error) {
				p, err := ina.New(ina.Config{Aggregators: sw.Aggregators}, base)
				if err != nil {
					return nil, err
				}
				return p, nil
			},
			Entries: func(top *topologies.Topology, sw *topologies.Node, c p4rt.Client) ([]*p4v1.Update, error) {
				ctl, err := ina.NewController(c)
				if err != nil {
					return nil, err
				}
				return ctl.RouteUpdates(top, sw.Name)
			}},
		goswitch.Program{Name: "farmem", P4Info: farmem.P4Info(),
			New: func(sw *topologies.Node, base *fwd.Pipeline) (goswitch.Dataplane, error) {
				return farmem.New(base), nil
			}},
		goswitch.Program{Name: freeina.ProgramName, P4Info: freeInfo,
			New: func(sw *topologies.Node, base *fwd.Pipeline) (goswitch.Dataplane, error) {
				p, err := freeina.New(freeina.Config{Slots: freeina.SlotsFor(sw.Aggregators, freeina.DefaultK)}, base)
				if err != nil {
					return nil, err
				}
				return p, nil
			}},
	)
}
