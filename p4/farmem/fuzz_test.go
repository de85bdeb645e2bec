package farmem

import (
	"context"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

// FuzzDeviceWrite applies an arbitrary P4Runtime write request to a
// programmed pipeline, then feeds it an arbitrary frame and every vector's
// frame: the write must answer with an error or apply, never panic, and
// whatever the classify table and counters now hold, every frame is
// counted in exactly one cell and leaves, if at all, once, on a real port
// in one of the eight queues.
func FuzzDeviceWrite(f *testing.F) {
	p, top := starPipeline(f)
	rec := &p4rt.Recorder{Device: p}
	if err := Program(context.Background(), p4rt.Local(rec), glitterRules()); err != nil {
		f.Fatal(err)
	}
	var frames [][]byte
	for _, tc := range vectorCases() {
		frames = append(frames, buildFrame(top, tc))
	}
	for i, u := range rec.Updates {
		b, err := proto.Marshal(&p4v1.WriteRequest{Updates: []*p4v1.Update{u}})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, frames[i%len(frames)])
	}
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, data, fr []byte) {
		var req p4v1.WriteRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		p, _ := starPipeline(t)
		program(t, p, glitterRules())
		_ = p.Write(req.GetUpdates())
		for _, u := range req.GetUpdates() {
			_ = p.Read(u.GetEntity(), func(*p4v1.Entity) error { return nil })
		}
		for _, g := range append([][]byte{fr}, frames...) {
			var c capture
			before := p.Base().Counters
			p.Process(0, 1, append([]byte(nil), g...), &c)
			after := p.Base().Counters
			if n := after.Forwarded + sum(after.Drops[:]) - before.Forwarded - sum(before.Drops[:]); n != 1 {
				t.Fatalf("one frame counted %d times", n)
			}
			if len(c.out) > 1 {
				t.Fatalf("%d frames out of one", len(c.out))
			}
			for _, o := range c.out {
				if o.Port < 1 || o.Port > 3 || o.Priority < 0 || o.Priority > 7 {
					t.Fatalf("emitted on port %d priority %d", o.Port, o.Priority)
				}
			}
		}
	})
}
