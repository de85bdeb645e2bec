package fwd

import (
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/topologies"
)

// TestRouteUpdates: the entries RouteUpdates writes are the Go twin's own
// (a MODIFY with them is accepted and reads back the same), and an INSERT
// of them on the twin, which has them, is refused.
func TestRouteUpdates(t *testing.T) {
	f, err := topologies.Generate(topologies.Params{Generate: "leafspine", Spines: 2, Leaves: 2, HostsPerLeaf: 2})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, sw := range []string{"leaf1", "spine1"} {
		p := New(top.Node(sw), top.Routes()[sw])
		n, err := p4rt.NewNames(p.P4Info())
		if err != nil {
			t.Fatal(err)
		}
		before, err := p4rt.Local(p).Read(t.Context(), p4rt.Table(&p4v1.TableEntry{}))
		if err != nil {
			t.Fatal(err)
		}
		ups, err := RouteUpdates(n, top, sw, p4v1.Update_MODIFY)
		if err != nil {
			t.Fatal(err)
		}
		if len(ups) != len(top.Hosts()) {
			t.Fatalf("%s: %d updates for %d hosts", sw, len(ups), len(top.Hosts()))
		}
		if err := p.Write(ups); err != nil {
			t.Fatalf("%s: the twin refuses its own routes: %v", sw, err)
		}
		after, err := p4rt.Local(p).Read(t.Context(), p4rt.Table(&p4v1.TableEntry{}))
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Fatalf("%s: %d entries after, %d before", sw, len(after), len(before))
		}
		ins, _ := RouteUpdates(n, top, sw, p4v1.Update_INSERT)
		if err := p.Write(ins); err == nil {
			t.Fatalf("%s: inserting existing routes succeeded", sw)
		}
	}
}
