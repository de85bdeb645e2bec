package farmem

import (
	"context"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/bmv2/bmv2test"
	"github.com/tracebed/tracebed/emulator/bmv2/usefiles"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// TestVectorsBMv2 runs testdata/vectors.json through bmv2 running
// farmem.p4: it compiles the program with p4c-bm2-ss, replays the frames
// on simple_switch_grpc reading pcap files with eight priority queues
// (bmv2.Replay), programmed over P4Runtime by tracebed's own client — the
// topology's routes as fwd.RouteUpdates writes them, the rules with
// Program, as on the Go switch — and compares the frames out of each port
// with the Go twin's from the EtherType on (farmem.p4 does not rewrite
// Ethernet addresses), then the counters: forwarding, drops by reason, far-memory
// classes and outcomes. Priority is observable through the DSCP re-marking.
//
// It needs p4c-bm2-ss and simple_switch_grpc on PATH and skips otherwise.
func TestVectorsBMv2(t *testing.T) {
	v := readVectors(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prog := SwitchProgram()
	compiled := bmv2test.Compile(ctx, t, &prog)
	if err := p4rt.SameObjects(P4Info(), compiled.P4Info); err != nil {
		t.Fatalf("p4c's P4Info and the Go twin's differ: %v", err)
	}
	_, top := starPipeline(t)
	var frames []usefiles.Frame
	for _, vec := range v.Vectors {
		b, err := hex.DecodeString(vec.Frame)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, usefiles.Frame{Port: vec.InPort, Data: b})
	}
	n := uint64(len(frames))
	r := &bmv2.Replay{Program: compiled, Ports: len(v.Hosts), Frames: frames, PriorityQueues: 8,
		Setup: func(ctx context.Context, c *p4rt.GRPC) error { return setupBMv2(ctx, c, top, v.Rules) },
		Done: func(ctx context.Context, c *p4rt.GRPC) (bool, error) {
			fc, err := fwd.ReadCounters(ctx, c)
			return fc.Total() >= n, err
		},
		Check: func(ctx context.Context, c *p4rt.GRPC) error {
			fc, err := fwd.ReadCounters(ctx, c)
			if err != nil {
				return err
			}
			if fc.Forwarded != v.Forwarded || fc.Drops != v.Drops {
				t.Errorf("bmv2 counted %d forwarded, drops %v; the Go twin %d, %v", fc.Forwarded, fc.Drops, v.Forwarded, v.Drops)
			}
			cc, err := ReadCounts(ctx, c)
			if err != nil {
				return err
			}
			if cc.Stats != v.Stats {
				t.Errorf("bmv2's far-memory outcomes %v, the Go twin's %v", cc.Stats, v.Stats)
			}
			for i := range NumClasses {
				if got, want := [2]uint64{cc.Packets[i], cc.Bytes[i]}, v.Class[i]; got != want {
					t.Errorf("class %d: bmv2 counted %v packets and bytes, the Go twin %v", i, got, want)
				}
			}
			return nil
		}}
	outputs, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]string{}
	for _, vec := range v.Vectors {
		for _, o := range vec.Out {
			want[o.Port] = append(want[o.Port], o.Frame)
		}
	}
	// Per port, in any order: frames of different classes that meet in
	// bmv2's strict-priority egress queues leave by priority, and whether
	// they meet depends on the machine's load, not on the program.
	for p := 1; p <= len(v.Hosts); p++ {
		var got, w []string
		for _, b := range outputs[p] {
			got = append(got, hex.EncodeToString(b[12:])) // skip the MACs
		}
		for _, f := range want[p] {
			w = append(w, f[24:])
		}
		slices.Sort(got)
		slices.Sort(w)
		if len(got) != len(w) {
			t.Errorf("port %d: %d frames out, want %d", p, len(got), len(w))
			continue
		}
		for i := range w {
			if got[i] != w[i] {
				t.Errorf("port %d: a frame differs from the Go twin's:\n bmv2 %s\n go   %s", p, got[i], w[i])
			}
		}
	}
}

// setupBMv2 programs a freshly loaded farmem.p4: the star's routes and the
// classification rules.
func setupBMv2(ctx context.Context, c *p4rt.GRPC, top *topologies.Topology, rules []Rule) error {
	n, err := c.Names()
	if err != nil {
		return err
	}
	routes, err := fwd.RouteUpdates(n, top, "tor", p4v1.Update_INSERT)
	if err != nil {
		return err
	}
	if err := c.Write(ctx, routes...); err != nil {
		return err
	}
	return Program(ctx, c, rules)
}
