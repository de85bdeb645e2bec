package ina

import (
	"strings"
	"testing"

	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// TestMaxAggregatorsIsTheDataPlanes: a switch with the most aggregators a
// topology accepts gets an INA pipeline, and one more is refused by both,
// so what validates runs.
func TestMaxAggregatorsIsTheDataPlanes(t *testing.T) {
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Aggregators: topologies.MaxAggregators})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("t")
	if err != nil {
		t.Fatal(err)
	}
	sw := top.Switches()[0]
	if _, err := New(Config{Aggregators: sw.Aggregators}, fwd.New(sw, top.Routes()[sw.Name])); err != nil {
		t.Errorf("the data plane refuses %d aggregators, which a topology accepts: %v", sw.Aggregators, err)
	}
	if _, err := New(Config{Aggregators: topologies.MaxAggregators + 1}, fwd.New(sw, top.Routes()[sw.Name])); err == nil {
		t.Errorf("the data plane accepts %d aggregators, which a topology refuses", topologies.MaxAggregators+1)
	}
	if _, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 2, Aggregators: 1e12}); err == nil || !strings.Contains(err.Error(), "aggregators") {
		t.Errorf("Generate with 1e12 aggregators: %v", err)
	}
}
