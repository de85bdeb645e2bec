package ina

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/bmv2/bmv2test"
	"github.com/tracebed/tracebed/emulator/bmv2/usefiles"
	"github.com/tracebed/tracebed/emulator/p4rt"
)

// TestVectorsBMv2 runs ina.p4 on bmv2 against the packet vectors: it
// compiles the program with p4c-bm2-ss, checks that p4c's P4Info has every
// object of the Go twin's by name (same kinds, widths and sizes), then, for
// each vector file, replays the frames on simple_switch_grpc reading pcap
// files (bmv2.Replay), programmed through P4Runtime with the same
// controller code the Go twin uses, and compares every port's output with
// the vectors and the switch's frame accounting with the frames sent.
//
// It needs p4c-bm2-ss and simple_switch_grpc on PATH (p4lang/p4c and
// p4lang/behavioral-model built with P4Runtime support) and skips otherwise.
func TestVectorsBMv2(t *testing.T) {
	prog, err := SwitchProgram()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	compiled := bmv2test.Compile(ctx, t, &prog)
	if err := sameObjects(compiled.P4Info); err != nil {
		t.Fatalf("p4c's P4Info and the Go twin's differ: %v", err)
	}
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) { runBMv2(t, v, compiled) })
	}
}

// sameObjects checks that info (from p4c) has every table, action,
// register and counter of the Go twin's P4Info with the same shape.
func sameObjects(info *p4configv1.P4Info) error {
	goInfo, err := P4Info(Config{K: DefaultK, Aggregators: 8192})
	if err != nil {
		return err
	}
	them, err := p4rt.NewNames(info)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range goInfo.GetActions() {
		b, err := them.Action(a.GetPreamble().GetName())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range a.GetParams() {
			q, err := them.Param(a.GetPreamble().GetName(), p.GetName())
			if err != nil || q.GetBitwidth() != p.GetBitwidth() {
				errs = append(errs, fmt.Errorf("action %s param %s: %v (width %d, want %d)", a.GetPreamble().GetName(), p.GetName(), err, q.GetBitwidth(), p.GetBitwidth()))
			}
		}
		if len(b.GetParams()) != len(a.GetParams()) {
			errs = append(errs, fmt.Errorf("action %s has %d params, want %d", a.GetPreamble().GetName(), len(b.GetParams()), len(a.GetParams())))
		}
	}
	for _, tb := range goInfo.GetTables() {
		name := tb.GetPreamble().GetName()
		if _, err := them.Table(name); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, mf := range tb.GetMatchFields() {
			m, err := them.MatchField(name, mf.GetName())
			if err != nil || m.GetBitwidth() != mf.GetBitwidth() || m.GetMatchType() != mf.GetMatchType() {
				errs = append(errs, fmt.Errorf("table %s field %s: %v (%v/%d, want %v/%d)", name, mf.GetName(), err, m.GetMatchType(), m.GetBitwidth(), mf.GetMatchType(), mf.GetBitwidth()))
			}
		}
	}
	for _, r := range goInfo.GetRegisters() {
		q, err := them.Register(r.GetPreamble().GetName())
		if err != nil || q.GetSize() != r.GetSize() || p4rt.RegisterWidth(q) != p4rt.RegisterWidth(r) {
			errs = append(errs, fmt.Errorf("register %s: %v (size %d width %d, want %d, %d)", r.GetPreamble().GetName(), err, q.GetSize(), p4rt.RegisterWidth(q), r.GetSize(), p4rt.RegisterWidth(r)))
		}
	}
	for _, c := range goInfo.GetCounters() {
		q, err := them.Counter(c.GetPreamble().GetName())
		if err != nil || q.GetSize() != c.GetSize() || q.GetSpec().GetUnit() != c.GetSpec().GetUnit() {
			errs = append(errs, fmt.Errorf("counter %s: %v", c.GetPreamble().GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// runBMv2 replays one vector file on simple_switch_grpc.
func runBMv2(t *testing.T, v *vectorFile, compiled *bmv2.Program) {
	var frames []usefiles.Frame
	for _, st := range v.Steps {
		b, err := hex.DecodeString(st.In)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, usefiles.Frame{Port: st.InPort, Data: b})
	}
	top, err := vectorTopology(v.Hosts)
	if err != nil {
		t.Fatal(err)
	}
	var ctl *Controller
	r := &bmv2.Replay{Program: compiled, Ports: v.Hosts, Frames: frames, Gap: 20 * time.Millisecond,
		Setup: func(ctx context.Context, c *p4rt.GRPC) error {
			var err error
			if ctl, err = NewController(c); err != nil {
				return err
			}
			ups, err := v.program(top, ctl)
			if err != nil {
				return err
			}
			return c.Write(ctx, ups...)
		},
		// Every frame in is counted once (FrameCounts).
		Done: func(ctx context.Context, _ *p4rt.GRPC) (bool, error) {
			fc, err := ctl.FrameCounts(ctx)
			return fc.Total() >= uint64(len(v.Steps)), err
		},
		Check: func(ctx context.Context, _ *p4rt.GRPC) error {
			fc, err := ctl.FrameCounts(ctx)
			if err == nil && fc.Total() != uint64(len(v.Steps)) {
				t.Errorf("%d frames in, bmv2's counters account for %d: %+v", len(v.Steps), fc.Total(), fc)
			}
			return err
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outputs, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for p := 1; p <= v.Hosts; p++ {
		var want []string
		for _, st := range v.Steps {
			for _, o := range st.Out {
				if o.Port == p {
					want = append(want, o.Frame)
				}
			}
		}
		var got []string
		for _, b := range outputs[p] {
			got = append(got, hex.EncodeToString(b))
		}
		if !slices.Equal(got, want) {
			t.Errorf("port %d: bmv2 sent %d frames, the vectors want %d\n got %v\nwant %v", p, len(got), len(want), got, want)
		}
	}
}

// TestSameObjects checks the P4Info comparison the bmv2 test relies on.
func TestSameObjects(t *testing.T) {
	info, err := P4Info(Config{K: DefaultK, Aggregators: 8192})
	if err != nil {
		t.Fatal(err)
	}
	if err := sameObjects(info); err != nil {
		t.Fatalf("the Go P4Info differs from itself: %v", err)
	}
	info.Registers[0].Size = 10
	info.Actions[0].Params[1].Bitwidth = 16
	info.Tables = info.Tables[1:]
	err = sameObjects(info)
	for _, want := range []string{"agg_bitmap", "param gen", "no table named \"InaIngress.jobs\""} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}
