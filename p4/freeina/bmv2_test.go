package freeina

import (
	"context"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/bmv2/bmv2test"
	"github.com/tracebed/tracebed/emulator/bmv2/usefiles"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
)

// TestVectorsBMv2 runs freeina.p4 on bmv2 against the packet vectors: it
// compiles the program with p4c-bm2-ss, checks that p4c's P4Info has every
// object of the Go twin's by name (same kinds, widths and sizes), then, for
// each vector file, replays the frames on simple_switch_grpc reading pcap
// files (bmv2.Replay), programmed through P4Runtime with the controller
// code the Go twin uses
// (routes, rings, bindings), and compares every port's output with the
// vectors from the EtherType on (fwd.p4, whose forwarding freeina.p4
// keeps, leaves Ethernet addresses to a table it does not have; the
// replicas' addresses come from freeina_replicas on both).
//
// It needs p4c-bm2-ss and simple_switch_grpc on PATH and skips otherwise.
func TestVectorsBMv2(t *testing.T) {
	prog, err := SwitchProgram()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	compiled := bmv2test.Compile(ctx, t, &prog)
	info := compiled.P4Info
	want, err := P4Info(sourceConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := p4rt.SameObjects(want, info); err != nil {
		t.Fatalf("p4c's P4Info and the Go twin's differ: %v", err)
	}
	files, err := filepath.Glob(filepath.Join("testdata", "vectors", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		v := readVectorFile(t, path)
		t.Run(v.Name, func(t *testing.T) { runBMv2(t, v, compiled) })
	}
}

// runBMv2 replays one vector file on simple_switch_grpc (bmv2.Replay).
func runBMv2(t *testing.T, v *vectorFile, compiled *bmv2.Program) {
	var frames []usefiles.Frame
	for _, st := range v.Steps {
		b, err := hex.DecodeString(st.In)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, usefiles.Frame{Port: st.InPort, Data: b})
	}
	top := starTopology(t, v.Hosts)
	r := &bmv2.Replay{Program: compiled, Ports: v.Hosts, Frames: frames, Gap: 20 * time.Millisecond,
		Setup: func(ctx context.Context, c *p4rt.GRPC) error {
			ctl, err := NewController(c)
			if err != nil {
				return err
			}
			routes, err := fwd.RouteUpdates(ctl.Names(), top, "tor", p4v1.Update_INSERT)
			if err != nil {
				return err
			}
			if err := c.Write(ctx, routes...); err != nil {
				return fmt.Errorf("routes: %w", err)
			}
			for _, r := range v.Rings {
				if err := ctl.AddRing(ctx, top, "tor", r.ring(top)); err != nil {
					return fmt.Errorf("ring of job %d: %w", r.Job, err)
				}
			}
			for _, b := range v.Binds {
				if err := ctl.Bind(ctx, b.binding(), b.PSN); err != nil {
					return fmt.Errorf("binding of job %d: %w", b.Job, err)
				}
			}
			return nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outputs, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for p := 1; p <= v.Hosts; p++ {
		var want, got []string
		for _, st := range v.Steps {
			for _, o := range st.Out {
				if o.Port == p {
					want = append(want, o.Frame[24:]) // from the EtherType on
				}
			}
		}
		for _, b := range outputs[p] {
			got = append(got, hex.EncodeToString(b[12:]))
		}
		if !slices.Equal(got, want) {
			t.Errorf("port %d: bmv2 sent %d frames, the vectors want %d\n got %v\nwant %v", p, len(got), len(want), got, want)
		}
	}
}
