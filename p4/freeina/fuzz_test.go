package freeina

import (
	"context"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

// FuzzDeviceWrite applies an arbitrary P4Runtime write request to a
// programmed pipeline, then feeds it an arbitrary frame and a valid INA
// frame: the write must answer with an error or apply, never panic, and
// whatever the tables and registers now hold, reading back the entities
// it names never panics and every frame is counted once.
func FuzzDeviceWrite(f *testing.F) {
	top := starTopology(f, 4)
	r := ringSpec{Job: 3, Group: 4, Hosts: []int{1, 2}, QPN: []uint32{0x11, 0x12}, RKey: []uint32{1, 2}, VA: []uint64{0x1000, 0x2000}}
	binds := []bindSpec{{Job: 3, Gen: 1, Base: 0, Size: 4, Chunks: 100, Workers: 2, Group: 4, PSN: []uint32{10, 20}}}
	valid := inaFrame(top, r, 0, 10, 0, constVals(DefaultK, 1))
	// Seeds: the requests a controller writes to program the ring and the
	// binding, one by one and as one batch.
	rec := &p4rt.Recorder{Device: newPipeline(f, top, DefaultK)}
	ctl, err := NewController(p4rt.Local(rec))
	if err != nil {
		f.Fatal(err)
	}
	if err := ctl.AddRing(context.Background(), top, "tor", r.ring(top)); err != nil {
		f.Fatal(err)
	}
	if err := ctl.Bind(context.Background(), binds[0].binding(), binds[0].PSN); err != nil {
		f.Fatal(err)
	}
	for _, u := range rec.Updates {
		f.Add(must(proto.Marshal(&p4v1.WriteRequest{Updates: []*p4v1.Update{u}})), valid)
	}
	f.Add(must(proto.Marshal(&p4v1.WriteRequest{Updates: rec.Updates})), valid)
	f.Add([]byte{}, valid[:40])
	f.Fuzz(func(t *testing.T, data, fr []byte) {
		var req p4v1.WriteRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		p := newPipeline(t, top, DefaultK)
		program(t, p, top, []ringSpec{r}, binds)
		_ = p.Write(req.GetUpdates())
		for _, u := range req.GetUpdates() {
			if err := p.Read(u.GetEntity(), func(*p4v1.Entity) error { return nil }); err != nil {
				continue // a query the target refuses is an answer
			}
		}
		for _, g := range [][]byte{fr, valid} {
			counted := frameCounts(t, p).Total()
			p.Process(0, 1, append([]byte(nil), g...), newCapture())
			if n := frameCounts(t, p).Total() - counted; n != 1 {
				t.Fatalf("one frame in, %d counted", n)
			}
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
