package flow

import (
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
)

// SimBinder builds the INA pipeline (p4/ina, the Go twin of ina.p4) of
// every switch of top that has aggregators, as the packet-level simulation
// does, and returns the controller's P4Runtime binder over in-process
// clients. In a flow-level run no packet crosses these pipelines, but every
// binding the controller makes is a real P4Runtime write that the data
// plane checks (pool bounds, modes, job ids) and stores.
func SimBinder(top *topologies.Topology) (*inasched.P4RT, map[string]*ina.Pipeline, error) {
	routes := top.Routes()
	clients := map[string]p4rt.Client{}
	pls := map[string]*ina.Pipeline{}
	for _, sw := range top.Switches() {
		if sw.Aggregators <= 0 {
			continue
		}
		pl, err := ina.New(ina.Config{K: ina.DefaultK, Aggregators: sw.Aggregators}, fwd.New(sw, routes[sw.Name]))
		if err != nil {
			return nil, nil, err
		}
		clients[sw.Name] = p4rt.Local(pl)
		pls[sw.Name] = pl
	}
	b, err := inasched.NewP4RT(top, clients)
	return b, pls, err
}
