// Package dataplane is the contract between tracebed's substrates and the
// data planes they run. The engine (packages emulator/...) knows no data
// plane: the simulation, the Go switch, bmv2 and the testbeds are handed a
// Program — a name, a P4Info, a constructor and, for bmv2, the P4-16
// source — or a Registry of them, which the command assembles (cmd/tracebed
// from p4/programs), in the way gVisor's link/nested wraps a
// stack.LinkEndpoint interface rather than a concrete endpoint.
package dataplane

import (
	"errors"
	"fmt"
	"slices"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/topologies"
)

// Dataplane is a pipeline a switch can run and a controller can program:
// the packet path and its P4Runtime view. A substrate calls both from one
// goroutine.
type Dataplane interface {
	emulator.Pipeline
	p4rt.Device
}

// Program is a data plane a switch can host: one of p4/'s pipelines.
type Program struct {
	// Name selects the program on the command line; it equals the
	// P4Info's pkg_info.name, by which SetForwardingPipelineConfig finds
	// the program.
	Name string
	// P4Info describes the program's tables, actions and counters.
	P4Info *p4configv1.P4Info
	// New builds the program for switch sw with fresh state; routes are
	// the switch's shortest-path routes in its topology
	// (topologies.Topology.Routes), which it installs as it starts. It is
	// called once per switch when a network comes up, and again each time
	// a controller loads the program.
	New func(sw *topologies.Node, routes topologies.RouteTable) (Dataplane, error)
	// Source is the program's P4-16 source for the v1model architecture,
	// which bmv2 compiles with p4c (package emulator/bmv2); nil when the
	// program has no P4 twin.
	Source []byte
	// Entries, if set, returns the updates that make a target which
	// starts with empty tables (bmv2 running the program's P4 source)
	// forward as the Go twin does from its constructor — typically the
	// topology's routes — written with the names of c's P4Info. When nil,
	// the entries are read from the Go twin (package emulator/bmv2).
	Entries func(top *topologies.Topology, sw *topologies.Node, c p4rt.Client) ([]*p4v1.Update, error)
}

// Pipeline adapts p.New to the constructor the simulation takes
// (sim.Options.Pipeline).
func (p *Program) Pipeline(sw *topologies.Node, routes topologies.RouteTable) (emulator.Pipeline, error) {
	return p.New(sw, routes)
}

// Registry holds the programs a switch can run. The command that starts
// the switch builds it; there is no global registry. The first program is
// the default: the one a switch runs until a controller loads another.
type Registry struct{ programs []*Program }

// NewRegistry returns a registry of programs. Names must be unique and
// match the P4Info package names.
func NewRegistry(programs ...Program) (*Registry, error) {
	if len(programs) == 0 {
		return nil, errors.New("switch programs: none given")
	}
	r := &Registry{}
	for i := range programs {
		p := programs[i]
		if p.Name == "" || p.New == nil || p.P4Info == nil {
			return nil, fmt.Errorf("switch programs: entry %d needs a name, a P4Info and a constructor", i)
		}
		if got := p.P4Info.GetPkgInfo().GetName(); got != p.Name {
			return nil, fmt.Errorf("switch programs: %s: P4Info pkg_info.name is %q", p.Name, got)
		}
		if r.Lookup(p.Name) != nil {
			return nil, fmt.Errorf("switch programs: %s registered twice", p.Name)
		}
		r.programs = append(r.programs, &p)
	}
	return r, nil
}

// Default returns the program a switch starts with: the first one
// registered.
func (r *Registry) Default() *Program { return r.programs[0] }

// Lookup returns the program called name, or nil.
func (r *Registry) Lookup(name string) *Program {
	for _, p := range r.programs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Names lists the registered programs.
func (r *Registry) Names() []string {
	var out []string
	for _, p := range r.programs {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// Match finds the program a controller's P4Info describes: the one with the
// same package name, whose every table, action, action profile, counter,
// register and meter the P4Info names with the same id. It returns an
// error saying what differs.
func (r *Registry) Match(info *p4configv1.P4Info) (*Program, error) {
	name := info.GetPkgInfo().GetName()
	if name == "" {
		return nil, fmt.Errorf("P4Info has no pkg_info.name; this switch runs %v", r.Names())
	}
	p := r.Lookup(name)
	if p == nil {
		return nil, fmt.Errorf("no program %q on this switch; it runs %v", name, r.Names())
	}
	want := objectIDs(p.P4Info)
	for key, id := range objectIDs(info) {
		if w, ok := want[key]; !ok {
			return nil, fmt.Errorf("program %s has no %s", name, key)
		} else if w != id {
			return nil, fmt.Errorf("program %s: %s has id %#x, P4Info says %#x", name, key, w, id)
		}
	}
	return p, nil
}

// objectIDs maps "kind name" to id for every named object of info.
func objectIDs(info *p4configv1.P4Info) map[string]uint32 {
	m := map[string]uint32{}
	add := func(kind string, pre *p4configv1.Preamble) {
		if pre != nil {
			m[kind+" "+pre.GetName()] = pre.GetId()
		}
	}
	for _, t := range info.GetTables() {
		add("table", t.GetPreamble())
	}
	for _, a := range info.GetActions() {
		add("action", a.GetPreamble())
	}
	for _, a := range info.GetActionProfiles() {
		add("action profile", a.GetPreamble())
	}
	for _, c := range info.GetCounters() {
		add("counter", c.GetPreamble())
	}
	for _, c := range info.GetDirectCounters() {
		add("direct counter", c.GetPreamble())
	}
	for _, x := range info.GetRegisters() {
		add("register", x.GetPreamble())
	}
	for _, x := range info.GetMeters() {
		add("meter", x.GetPreamble())
	}
	return m
}
