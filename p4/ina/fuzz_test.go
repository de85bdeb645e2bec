package ina

import (
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
)

// FuzzPipeline feeds arbitrary frames, and mutations of valid INA frames, to
// a programmed pipeline: it must never panic, must count every frame in
// exactly one counter P4Runtime reads (a frame without a valid UDP
// checksum never as a job's packet), and must emit only on real ports.
func FuzzPipeline(f *testing.F) {
	r := newRig(f, 4, 16)
	r.bind(Binding{Job: 1, ToRound: MaxRound, Mode: ModePool, Gen: 1, Base: 0, Size: 4, Workers: 2, Group: 1}, 2)
	r.bind(Binding{Job: 2, ToRound: MaxRound, Mode: ModeShared, Gen: 2, Base: 4, Size: 4, Workers: 2, Group: 2, PS: r.addr(5)}, 2)
	f.Add(r.data(1, 0, 2, 1, 0, 0, 0, 0, r.vals(1)), uint8(1))
	f.Add(r.data(2, 1, 2, 1, 0, 0, 8, FlagRetransmit, r.vals(1)), uint8(2))
	f.Add(r.packet(5, r.swAddr(), Header{Flags: FlagResult, Job: 2, Workers: 2, Bitmap: 3}, r.vals(0)), uint8(5))
	f.Add([]byte{1, 2, 3}, uint8(1))
	// The cells CounterForwarded, CounterDrops and CounterPackets read
	// (FrameCounts, which TestVectorsCountEveryFrame reads through
	// P4Runtime; read here directly, as a read of every job's cell per
	// input would leave the fuzzer little time for inputs).
	counts := func(*testing.T) FrameCounts {
		fc := FrameCounts{Forwarded: r.p.forwarded[0].pk}
		for i, c := range r.p.drops {
			fc.Drops[i] = c.pk
		}
		for _, c := range r.p.packets {
			fc.JobPackets += c.pk
		}
		return fc
	}
	f.Fuzz(func(t *testing.T, b []byte, port uint8) {
		before := counts(t)
		for _, e := range r.in(int(port%6), b) {
			if e.Port < 1 || e.Port > 5 {
				t.Fatalf("emitted on port %d", e.Port)
			}
		}
		// Every frame is counted in exactly one counter P4Runtime reads,
		// and one whose UDP checksum is absent or wrong is never a job's
		// packet (aggregated, or answered from a result).
		after := counts(t)
		if after.Total() != before.Total()+1 {
			t.Fatalf("one frame in, %d counted: %+v → %+v", after.Total()-before.Total(), before, after)
		}
		if ok := validUDPChecksum(b); !ok && after.JobPackets != before.JobPackets {
			t.Fatalf("a frame without a valid UDP checksum counted as a job's packet")
		}
	})
}

// validUDPChecksum reports whether f is a UDP/IPv4 frame with a UDP
// checksum, and a correct one.
func validUDPChecksum(f []byte) bool {
	present, ok := frame.UDPChecksum(f)
	return present && ok
}

// FuzzDeviceWrite applies arbitrary P4Runtime write requests to the device:
// it must answer with an error or apply them, never panic, and keep
// processing packets afterwards.
func FuzzDeviceWrite(f *testing.F) {
	r := newRig(f, 4, 16)
	n := r.ctl.Names()
	b := Binding{Job: 1, ToRound: MaxRound, Mode: ModeShared, Gen: 1, Base: 0, Size: 4, Workers: 2, Group: 1, PS: r.addr(5)}
	seed := &p4v1.WriteRequest{Updates: []*p4v1.Update{
		p4rt.Insert(p4rt.Table(must(b.Entry(n)))),
		p4rt.Insert(p4rt.MulticastGroup(1, []p4rt.Replica{{Port: 1, Instance: 1}})),
		p4rt.Modify(p4rt.Register(must(n.RegisterEntry(RegCount, 3, 1)))),
	}}
	f.Add(must(proto.Marshal(seed)))
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &p4v1.WriteRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		r := newRig(t, 4, 16)
		_ = r.p.Write(req.GetUpdates())
		for _, u := range req.GetUpdates() {
			_ = r.p.Read(u.GetEntity(), func(*p4v1.Entity) error { return nil })
		}
		r.in(1, r.data(1, 0, 2, 1, 0, 0, 0, 0, r.vals(1)))
	})
}

// FuzzParseBinding decodes arbitrary entries of the jobs table, as a
// switch may answer a Read with: an entry is a binding or an error, never
// a panic, and a binding is exactly what the entry holds — written back
// as an entry, every match field and parameter has the value it had (a
// value too wide for its field is an error, not a truncated binding).
func FuzzParseBinding(f *testing.F) {
	r := newRig(f, 4, 16)
	n := r.ctl.Names()
	for _, b := range []Binding{
		{Job: 1, ToRound: MaxRound, Mode: ModePool, Gen: 1, Base: 0, Size: 4, Workers: 2, Group: 1},
		{Job: 2, FromRound: 3, ToRound: 9, Mode: ModeShared, Gen: 2, Base: 4, Size: 4, Workers: 2, Group: 2, PS: r.addr(5), Hold: HoldReturn, Place: PlaceSlot, Epoch: 7, Members: 3},
	} {
		f.Add(must(proto.Marshal(must(b.Entry(n)))))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var te p4v1.TableEntry
		if proto.Unmarshal(data, &te) != nil {
			return
		}
		b, err := ParseBinding(n, &te)
		if err != nil {
			return
		}
		back, err := b.Entry(n)
		if err != nil {
			t.Fatalf("binding %+v does not encode: %v", b, err)
		}
		value := func(v []byte) uint64 { x, _ := p4rt.DecodeUint(v, 64); return x }
		want := map[uint32]uint64{}
		for _, p := range back.GetAction().GetAction().GetParams() {
			want[p.GetParamId()] = value(p.GetValue())
		}
		for _, p := range te.GetAction().GetAction().GetParams() {
			if w, ok := want[p.GetParamId()]; ok && value(p.GetValue()) != w {
				t.Fatalf("param %d: entry holds %#x, binding %+v holds %#x", p.GetParamId(), value(p.GetValue()), b, w)
			}
		}
		for i, m := range te.GetMatch() {
			for _, w := range back.GetMatch() {
				if w.GetFieldId() != m.GetFieldId() {
					continue
				}
				if m.GetExact() != nil && value(m.GetExact().GetValue()) != value(w.GetExact().GetValue()) ||
					m.GetRange() != nil && (value(m.GetRange().GetLow()) != value(w.GetRange().GetLow()) || value(m.GetRange().GetHigh()) != value(w.GetRange().GetHigh())) {
					t.Fatalf("match %d (%v) decoded as %v", i, m, w)
				}
			}
		}
	})
}
