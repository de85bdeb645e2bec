//go:build !linux || nonetns

package programs_test

import (
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/topologies"
)

// goSwitchTargets returns no target: the Go switch needs Linux (AF_PACKET
// ports, eventfd), so the conformance rows run on the local Devices (and
// bmv2 where installed) only.
func goSwitchTargets(*testing.T, *topologies.Topology, *topologies.Node, *dataplane.Registry, string, *fixture) []*target {
	return nil
}

// wires are a Go switch's ports; with no Go switch target, a target's
// wires are always nil and these are never called.
type wires struct{}

func (*wires) send(t *testing.T, _ int, _ []byte) { t.Fatal("no Go switch ports on this system") }

func (*wires) recv(int, time.Duration) ([]byte, bool) { return nil, false }

func (*wires) drain() {}
