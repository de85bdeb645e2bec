package main

import (
	goswitch "github.com/tracebed/tracebed/emulator/switch"
	"github.com/tracebed/tracebed/p4/farmem"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
)

// programs returns the data planes the Go switch can run, selected with
// 'tracebed switch --program NAME' or by a controller's
// SetForwardingPipelineConfig with the program's P4Info. A new pipeline of
// p4/ is added here: its name (= P4Info pkg_info.name), its P4Info and a
// constructor over the plain forwarding pipeline, as for sim.
func programs() (*goswitch.Registry, error) {
	inaInfo, err := ina.P4Info(ina.Config{})
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
			}},
		goswitch.Program{Name: "farmem", P4Info: farmem.P4Info(),
			New: func(sw *topologies.Node, base *fwd.Pipeline) (goswitch.Dataplane, error) {
				return farmem.New(base), nil
			}},
	)
}
