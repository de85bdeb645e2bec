package ina

import (
	"context"
	"hash/crc32"
	"math"
	"slices"
	"testing"

	"github.com/tracebed/tracebed/emulator/frame"
)

func sum(a, b []int32) []int32 {
	out := slices.Clone(a)
	for i := range out {
		out[i] += b[i]
	}
	return out
}

func (r *rig) counters(job uint16) JobCounters {
	r.t.Helper()
	c, err := r.ctl.Counters(context.Background(), job)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

func TestPoolAggregation(t *testing.T) {
	r := newRig(t, 8, 64)
	r.bind(Binding{Job: 5, ToRound: MaxRound, Mode: ModePool, Gen: 9, Base: 10, Size: 4, Workers: 3, Group: 1}, 3)
	a, b, c := r.vals(1), r.vals(100), r.vals(-7)
	if out := r.in(1, r.data(5, 0, 3, 2, 0, 0, 16, 0, a)); len(out) != 0 {
		t.Fatalf("first contribution emitted %d frames", len(out))
	}
	if out := r.in(1, r.data(5, 0, 3, 2, 0, 0, 16, 0, a)); len(out) != 0 {
		t.Fatalf("duplicate emitted %d frames", len(out))
	}
	if out := r.in(2, r.data(5, 1, 3, 2, 0, 0, 16, 0, b)); len(out) != 0 {
		t.Fatalf("second contribution emitted %d frames", len(out))
	}
	out := r.in(3, r.data(5, 2, 3, 2, 0, 0, 16, 0, c))
	if len(out) != 3 {
		t.Fatalf("completion emitted %d frames, want 3", len(out))
	}
	want := sum(sum(a, b), c)
	for i, e := range out {
		u, h, v := decode(t, e.Frame)
		if e.Port != i+1 || u.Dst != r.addr(i+1) || u.Src != r.swAddr() {
			t.Errorf("copy %d: port %d, %v -> %v", i, e.Port, u.Src, u.Dst)
		}
		if u.DstMAC != r.host(i+1).MAC {
			t.Errorf("copy %d: destination MAC %v", i, u.DstMAC)
		}
		if h.Flags != FlagResult || h.Bitmap != 7 || h.Offset != 16 || h.Slot != 2 || !slices.Equal(v, want) {
			t.Errorf("copy %d: %+v %v, want result of %v", i, h, v, want)
		}
	}
	// The cell holds the aggregate, in copy 0 of aggregator 12.
	cells, err := r.ctl.ReadCells(context.Background(), 24, 2, r.k)
	if err != nil {
		t.Fatal(err)
	}
	if cells[0].Count != 3 || cells[0].Bitmap != 7 || cells[0].Gen != 9 || cells[0].Offset != 16 || !slices.Equal(cells[0].Values, want) {
		t.Errorf("cell %+v", cells[0])
	}
	if cells[1].Count != 0 || cells[1].Gen != 0 {
		t.Errorf("the other copy was touched: %+v", cells[1])
	}
	// Worker 1 missed the result: its retransmission is answered alone.
	out = r.in(2, r.data(5, 1, 3, 2, 0, 0, 16, FlagRetransmit, b))
	if len(out) != 1 || out[0].Port != 2 {
		t.Fatalf("retransmission answered with %d frames", len(out))
	}
	if u, h, v := decode(t, out[0].Frame); u.Dst != r.addr(2) || h.Flags != FlagResult || !slices.Equal(v, want) {
		t.Errorf("answer %v %+v %v", u.Dst, h, v)
	}
	// The next chunk of slot 2 uses the other copy; the finished one still
	// answers retransmissions.
	r.in(1, r.data(5, 0, 3, 2, 1, 0, 48, 0, c))
	out = r.in(3, r.data(5, 2, 3, 2, 0, 0, 16, FlagRetransmit, c))
	if len(out) != 1 {
		t.Fatalf("shadow copy answered with %d frames", len(out))
	}
	if _, _, v := decode(t, out[0].Frame); !slices.Equal(v, want) {
		t.Errorf("shadow answer %v", v)
	}
	jc := r.counters(5)
	if jc.Drops[DropDuplicate] != 1 || jc.Aggregated != 4 || jc.Results != 3 || jc.Packets != 7 {
		t.Errorf("counters %+v", jc)
	}
}

func TestPoolStaleAndErrors(t *testing.T) {
	t.Parallel()
	r := newRig(t, 4, 16)
	r.bind(Binding{Job: 1, ToRound: MaxRound, Mode: ModePool, Gen: 1, Base: 0, Size: 2, Workers: 2, Group: 1}, 2)
	v := r.vals(1)
	// Chunk at offset 8 (round 3) sits in copy 0 of slot 0; a copy of the
	// chunk at offset 0 of that slot's earlier use is stale.
	r.in(1, r.data(1, 0, 2, 0, 0, 3, 8, 0, v))
	for _, tt := range []struct {
		name   string
		f      []byte
		reason int
	}{
		{"older offset", r.data(1, 1, 2, 0, 0, 3, 0, 0, v), DropStale},
		{"older round", r.data(1, 1, 2, 0, 0, 2, 100, 0, v), DropStale},
		{"slot outside pool", r.data(1, 1, 2, 2, 0, 3, 8, 0, v), DropBadSlot},
		{"worker count", r.data(1, 1, 3, 0, 0, 3, 8, 0, v), DropInconsistent},
		{"result from a worker", r.packet(2, r.swAddr(), Header{Flags: FlagResult, Job: 1, Workers: 2, Round: 3, Offset: 8, Bitmap: 3}, v), DropNotFromPS},
	} {
		before := r.counters(1).Drops[tt.reason]
		if out := r.in(2, tt.f); len(out) != 0 {
			t.Errorf("%s: emitted %d frames", tt.name, len(out))
		}
		if got := r.counters(1).Drops[tt.reason]; got != before+1 {
			t.Errorf("%s: %s drops %d, want %d", tt.name, JobDropNames[tt.reason], got, before+1)
		}
	}
	// k differs from the switch's: not an INA packet this switch can
	// aggregate.
	if out := r.in(2, r.data(1, 1, 2, 0, 0, 3, 8, 0, []int32{1, 2})); len(out) != 0 || r.p.drops[DropMalformed].pk != 1 {
		t.Errorf("short k: %d frames, drops %+v", len(out), r.p.drops)
	}
	// No binding for the job, and malformed INA packets: global drops.
	r.in(2, r.data(2, 1, 2, 0, 0, 0, 0, 0, v))
	bad := r.data(1, 1, 2, 0, 0, 3, 8, 0, v)
	bad[offINA] = 9
	frame.SetUDPChecksum(bad) // a sender that means it: malformed, not corrupted
	r.in(2, bad)
	payload := Append(nil, Header{Flags: FlagData, Job: 1, Worker: 1, Workers: 2, Round: 3, Offset: 8, Bitmap: 2}, v)
	r.in(2, frame.AppendUDP(nil, frame.UDP{Src: r.addr(2), Dst: r.swAddr()}, payload[:len(payload)-4]))
	truncated := r.data(1, 1, 2, 0, 0, 3, 8, 0, v)
	r.in(2, truncated[:len(truncated)-3]) // not even IPv4
	corrupt := r.data(1, 1, 2, 0, 0, 3, 8, 0, v)
	corrupt[len(corrupt)-1] ^= 1 // a value bit flipped on the way: never aggregated
	r.in(2, corrupt)
	unchecked := r.data(1, 1, 2, 0, 0, 3, 8, 0, v)
	frame.ClearUDPChecksum(unchecked) // INA packets must carry a checksum
	r.in(2, unchecked)
	if r.p.drops[DropNoJob].pk != 1 || r.p.drops[DropMalformed].pk != 3 || r.p.drops[DropNotIPv4].pk != 1 || r.p.drops[DropChecksum].pk != 2 {
		t.Errorf("global drops %+v", r.p.drops)
	}
	// The cell kept only the first contribution.
	cells, _ := r.ctl.ReadCells(context.Background(), 0, 1, r.k)
	if cells[0].Count != 1 || cells[0].Bitmap != 1 || !slices.Equal(cells[0].Values, v) {
		t.Errorf("cell changed: %+v", cells[0])
	}
}

func TestOverflowIsReported(t *testing.T) {
	r := newRig(t, 2, 4)
	r.bind(Binding{Job: 0, ToRound: MaxRound, Mode: ModePool, Gen: 1, Size: 1, Workers: 2, Group: 1}, 2)
	r.in(1, r.data(0, 0, 2, 0, 0, 0, 0, 0, []int32{math.MaxInt32, -5}))
	out := r.in(2, r.data(0, 1, 2, 0, 0, 0, 0, 0, []int32{1, 5}))
	if len(out) != 2 {
		t.Fatalf("%d frames", len(out))
	}
	if _, h, _ := decode(t, out[0].Frame); h.Flags != FlagResult|FlagOverflow {
		t.Errorf("flags %#x, want result|overflow", h.Flags)
	}
	if jc := r.counters(0); jc.Overflows != 1 {
		t.Errorf("overflows %d", jc.Overflows)
	}
}

func TestSharedMode(t *testing.T) {
	r := newRig(t, 4, 32)
	ps := r.addr(5)
	r.bind(Binding{Job: 7, ToRound: MaxRound, Mode: ModeShared, Gen: 3, Base: 8, Size: 8, Workers: 2, Group: 1, PS: ps}, 2)
	r.bind(Binding{Job: 8, ToRound: MaxRound, Mode: ModeShared, Gen: 4, Base: 8, Size: 8, Workers: 2, Group: 2, PS: ps}, 2)
	a, b := r.vals(10), r.vals(20)
	// Job 7's chunk at offset 0 claims its aggregator.
	r.in(1, r.data(7, 0, 2, 0, 0, 0, 0, 0, a))
	cell := 2 * int64(8+SharedIndex(7, 0, 8))
	// Find an offset of job 8 that hashes onto the same aggregator.
	var off uint32
	for off = 4; SharedIndex(8, off, 8) != SharedIndex(7, 0, 8); off += 4 {
	}
	out := r.in(1, r.data(8, 0, 2, 0, 0, 0, off, 0, b))
	if len(out) != 1 {
		t.Fatalf("collision emitted %d frames", len(out))
	}
	u, h, v := decode(t, out[0].Frame)
	if u.Dst != ps || out[0].Port != 5 || h.Flags != FlagData|FlagCollision || !slices.Equal(v, b) {
		t.Errorf("collision forwarded as %v %+v to port %d", u.Dst, h, out[0].Port)
	}
	if r.counters(8).Collisions != 1 {
		t.Error("collision not counted")
	}
	// Job 7 completes: the result goes to the PS and the cell is freed.
	out = r.in(2, r.data(7, 1, 2, 0, 0, 0, 0, 0, b))
	if len(out) != 1 {
		t.Fatalf("completion emitted %d frames", len(out))
	}
	if u, h, v := decode(t, out[0].Frame); u.Dst != ps || h.Flags != FlagResult || h.Bitmap != 3 || !slices.Equal(v, sum(a, b)) {
		t.Errorf("result to PS: %v %+v %v", u.Dst, h, v)
	}
	if c, _ := r.ctl.ReadRegister(context.Background(), RegCount, cell); c != 0 {
		t.Errorf("cell not freed: count %d", c)
	}
	// The PS sends the result back through the switch: multicast.
	res := r.packet(5, r.swAddr(), Header{Flags: FlagResult, Job: 7, Workers: 2, Round: 0, Offset: 0, Bitmap: 3}, sum(a, b))
	if out := r.in(5, res); len(out) != 2 || out[0].Port != 1 || out[1].Port != 2 {
		t.Errorf("PS result multicast as %d frames", len(out))
	}
	// A retransmission never claims a free cell: it goes to the PS.
	out = r.in(1, r.data(7, 0, 2, 0, 0, 0, 0, FlagRetransmit, a))
	if len(out) != 1 {
		t.Fatalf("retransmission emitted %d frames", len(out))
	} else if u, h, _ := decode(t, out[0].Frame); u.Dst != ps || h.Flags != FlagData|FlagRetransmit|FlagCollision {
		t.Errorf("retransmission forwarded as %+v to %v", h, u.Dst)
	}
	// A retransmission that finds its own chunk partial flushes it.
	r.in(1, r.data(7, 0, 2, 0, 0, 1, 0, 0, a))
	out = r.in(1, r.data(7, 0, 2, 0, 0, 1, 0, FlagRetransmit, a))
	if len(out) != 1 {
		t.Fatalf("flush emitted %d frames", len(out))
	}
	if u, h, v := decode(t, out[0].Frame); u.Dst != ps || h.Flags != FlagPartial|FlagRetransmit || h.Bitmap != 1 || !slices.Equal(v, a) {
		t.Errorf("flush %v %+v %v", u.Dst, h, v)
	}
	if c, _ := r.ctl.ReadRegister(context.Background(), RegCount, cell); c != 0 {
		t.Errorf("cell not freed by the flush: count %d", c)
	}
	// A stale partial of an older round of the same binding is reclaimed.
	r.in(1, r.data(7, 0, 2, 0, 0, 1, 0, 0, a))
	r.in(2, r.data(7, 1, 2, 0, 0, 2, 0, 0, b))
	cells, _ := r.ctl.ReadCells(context.Background(), cell, 1, r.k)
	if cells[0].Round != 2 || cells[0].Bitmap != 2 || !slices.Equal(cells[0].Values, b) {
		t.Errorf("stale partial not reclaimed: %+v", cells[0])
	}
}

func TestRoundRangesSelectBinding(t *testing.T) {
	r := newRig(t, 2, 16)
	r.bind(Binding{Job: 3, FromRound: 0, ToRound: 4, Mode: ModePool, Gen: 1, Base: 0, Size: 2, Workers: 1, Group: 1}, 1)
	if err := r.ctl.Bind(context.Background(), Binding{Job: 3, FromRound: 5, ToRound: MaxRound, Mode: ModePool, Gen: 2, Base: 8, Size: 2, Workers: 1, Group: 1}); err != nil {
		t.Fatal(err)
	}
	r.in(1, r.data(3, 0, 1, 1, 0, 4, 0, 0, []int32{1, 1}))
	r.in(1, r.data(3, 0, 1, 1, 0, 5, 0, 0, []int32{2, 2}))
	cells, _ := r.ctl.ReadCells(context.Background(), 0, 32, r.k)
	for c, cl := range cells {
		switch c {
		case 2:
			if cl.Gen != 1 || cl.Round != 4 {
				t.Errorf("round 4 not in the first pool: %+v", cl)
			}
		case 18:
			if cl.Gen != 2 || cl.Round != 5 {
				t.Errorf("round 5 not in the second pool: %+v", cl)
			}
		default:
			if cl.Gen != 0 {
				t.Errorf("cell %d touched: %+v", c, cl)
			}
		}
	}
}

func TestNonINATraffic(t *testing.T) {
	r := newRig(t, 2, 4)
	// Transit traffic is forwarded.
	f := frame.AppendUDP(nil, frame.UDP{SrcMAC: r.host(1).MAC, DstMAC: r.host(1).Ports[0].Peer.MAC, Src: r.addr(1), Dst: r.addr(3)}, []byte("hello"))
	if out := r.in(1, f); len(out) != 1 || out[0].Port != 3 {
		t.Errorf("transit frame: %v", out)
	}
	// Frames to the switch on another port are dropped as not INA.
	f = frame.AppendUDP(nil, frame.UDP{Src: r.addr(1), Dst: netipPort(r.swAddr(), 53)}, []byte("x"))
	r.in(1, f)
	if r.p.drops[DropNotINA].pk != 1 || r.p.forwarded[0].pk != 1 {
		t.Errorf("drops %v, forwarded %d", r.p.drops, r.p.forwarded[0].pk)
	}
}

func TestSharedIndexIsCRC32(t *testing.T) {
	for _, tt := range []struct {
		job  uint16
		off  uint32
		size uint32
	}{{0, 0, 7}, {1, 64, 1000}, {1023, 0xfffffff0, 8192}, {77, 12345678, 1}} {
		b := []byte{byte(tt.job >> 8), byte(tt.job), byte(tt.off >> 24), byte(tt.off >> 16), byte(tt.off >> 8), byte(tt.off)}
		if got, want := SharedIndex(tt.job, tt.off, tt.size), crc32.ChecksumIEEE(b)%tt.size; got != want {
			t.Errorf("SharedIndex(%d, %d, %d) = %d, want %d", tt.job, tt.off, tt.size, got, want)
		}
	}
}

func TestHoldTime(t *testing.T) {
	r := newRig(t, 2, 8)
	r.bind(Binding{Job: 4, ToRound: MaxRound, Mode: ModePool, Gen: 1, Size: 2, Workers: 2, Group: 1}, 2)
	var c capture
	r.p.Process(1000, 1, r.data(4, 0, 2, 0, 0, 0, 0, 0, []int32{1, 1}), &c)
	r.p.Process(1500, 1, r.data(4, 0, 2, 1, 0, 0, 2, 0, []int32{1, 1}), &c)
	r.p.Process(4000, 2, r.data(4, 1, 2, 0, 0, 0, 0, 0, []int32{1, 1}), &c)
	r.p.Process(4000, 2, r.data(4, 1, 2, 0, 0, 0, 0, 0, []int32{1, 1}), &c) // duplicate: no change
	if got := r.p.HoldTime(4); got != 3000 {
		t.Errorf("hold time %v, want 3µs (slot 1 still open)", got)
	}
	r.p.Process(9500, 2, r.data(4, 1, 2, 1, 0, 0, 2, 0, []int32{1, 1}), &c)
	if got := r.p.HoldTime(4); got != 3000+8000 {
		t.Errorf("hold time %v, want 11µs", got)
	}
}
