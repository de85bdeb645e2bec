package flow

import (
	"github.com/tracebed/tracebed/emulator/p4rt"
	freeinadp "github.com/tracebed/tracebed/p4/freeina"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/systems/freeina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/training/fabric"
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

// FreeSimBinder builds FreeINA's data plane (p4/freeina, the Go twin of
// freeina.p4, with payload bytes per packet) on every switch of top that
// has aggregators and returns the controller's binder over in-process
// clients: every all-reduce's binding is a real P4Runtime write, checked
// and stored by the data plane, as SimBinder's are, with the chunks of
// the job's gradient (lookup finds its model; nil: models.Lookup).
func FreeSimBinder(top *topologies.Topology, payload int, jobs []jobtrace.Job, lookup func(string) (models.Profile, bool)) (*freeina.P4RT, error) {
	if payload <= 0 {
		payload = fabric.DefaultRDMAPayload
	}
	if lookup == nil {
		lookup = models.Lookup
	}
	per := map[int]uint32{}
	for _, j := range jobs {
		if prof, ok := lookup(j.Model); ok {
			per[j.ID] = uint32((prof.GradientBytes + int64(payload) - 1) / int64(payload))
		}
	}
	chunks := func(job int) uint32 { return per[job] }
	routes := top.Routes()
	k := payload / 4
	clients := map[string]p4rt.Client{}
	for _, sw := range top.Switches() {
		if sw.Aggregators <= 0 {
			continue
		}
		pl, err := freeinadp.New(freeinadp.Config{K: k, Slots: freeinadp.SlotsFor(sw.Aggregators, k)}, fwd.New(sw, routes[sw.Name]))
		if err != nil {
			return nil, err
		}
		clients[sw.Name] = p4rt.Local(pl)
	}
	b, err := freeina.NewP4RT(top, clients)
	if err != nil {
		return nil, err
	}
	b.Slot, b.Chunks = k/64, chunks
	return b, nil
}
