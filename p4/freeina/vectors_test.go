package freeina

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/topologies"
)

var update = flag.Bool("update", false, "rewrite the golden files (testdata/vectors/*.json, freeina.p4)")

// A vector file (testdata/vectors/*.json) is a switch program and a
// sequence of frames in with the frames expected out, shared by the Go
// pipeline (TestVectors) and freeina.p4 on bmv2 (TestVectorsBMv2): both
// set the switch up from the file alone, through P4Runtime names.
type vectorFile struct {
	Name string `json:"name"`
	Doc  string `json:"doc"`
	// The switch is "tor" of a generated star of Hosts hosts (h1 on port
	// 1, …) with 8192 aggregators of 64 values; K values per packet.
	Hosts int          `json:"hosts"`
	K     int          `json:"k"`
	Rings []ringSpec   `json:"rings"`
	Binds []bindSpec   `json:"bindings"`
	Steps []vectorStep `json:"steps"`
}

type vectorStep struct {
	Doc    string         `json:"doc"`
	InPort int            `json:"in_port"`
	In     string         `json:"in"`
	Out    []vectorPacket `json:"out"`
}

type vectorPacket struct {
	Port  int    `json:"port"`
	Frame string `json:"frame"`
}

// vectorBuilder writes the steps of a scenario and checks each one's
// number of frames out against the scenario's own expectation, so that a
// golden file never records a bug unnoticed.
type vectorBuilder struct {
	t   *testing.T
	v   *vectorFile
	top *topologies.Topology
	p   *Pipeline
}

func newVectors(t *testing.T, name, doc string, hosts int, rings []ringSpec, binds []bindSpec) *vectorBuilder {
	top := starTopology(t, hosts)
	p := newPipeline(t, top, DefaultK)
	program(t, p, top, rings, binds)
	return &vectorBuilder{t: t, top: top, p: p,
		v: &vectorFile{Name: name, Doc: doc, Hosts: hosts, K: DefaultK, Rings: rings, Binds: binds}}
}

// step sends frame f in on port in and requires want frames out; check,
// if not nil, looks at them.
func (b *vectorBuilder) step(doc string, in int, f []byte, want int, check func([]decoded)) {
	b.t.Helper()
	c := newCapture()
	b.p.Process(0, in, append([]byte(nil), f...), c)
	if len(c.out) != want {
		b.t.Fatalf("%s: step %q: %d frames out, want %d", b.v.Name, doc, len(c.out), want)
	}
	if check != nil {
		var ds []decoded
		for _, o := range c.out {
			ds = append(ds, decode(b.t, o))
		}
		check(ds)
	}
	b.v.Steps = append(b.v.Steps, vectorStep{Doc: doc, InPort: in, In: hex.EncodeToString(f), Out: c.out})
}

func constVals(k int, v int32) []int32 {
	out := make([]int32, k)
	for i := range out {
		out[i] = v + int32(i)
	}
	return out
}

// vectorScenarios builds every vector file.
func vectorScenarios(t *testing.T) []*vectorFile {
	k := DefaultK
	ring := ringSpec{Job: 3, Group: 4, Hosts: []int{1, 2, 3}, QPN: []uint32{0x11, 0x12, 0x13},
		RKey: []uint32{0x101, 0x201, 0x301}, VA: []uint64{0x10000, 0x20000, 0x30000}}
	idle := ringSpec{Job: 9, Group: 10, Hosts: []int{1, 4}, QPN: []uint32{0x21, 0x24}, RKey: []uint32{0x111, 0x411}, VA: []uint64{0x1000, 0x4000}}
	// Worker 1's PSNs wrap around 2^24 within the all-reduce.
	bind := bindSpec{Job: 3, Gen: 7, Base: 10, Size: 2, Chunks: 6, Workers: 3, Group: 4, PSN: []uint32{100, 0xfffffe, 5000}}
	b := newVectors(t, "ring", "three workers in a ring through the switch: held contributions, completion and one replica per connection, "+
		"retransmissions answered from the slot, shadow copies, stale and out-of-range PSNs, PSN wrap, overflow, ICRC and form checks, "+
		"a job without memory, traffic that is not INA", 4, []ringSpec{ring, idle}, []bindSpec{bind})
	top := b.top
	psn := func(w int, c uint32) uint32 { return bind.PSN[w] + c }
	send := func(w int, c uint32, v int32) []byte { return inaFrame(top, ring, w, psn(w, c), c, constVals(k, v)) }
	port := func(w int) int { return ring.Hosts[w] } // host hN is behind port N
	sum := func(want []int32) func([]decoded) {
		return func(ds []decoded) {
			for _, d := range ds {
				if !reflect.DeepEqual(d.vals, want) {
					t.Fatalf("replica to port %d carries %v…, want %v…", d.port, d.vals[:2], want[:2])
				}
			}
		}
	}
	replicasOf := func(c uint32, want []int32) func([]decoded) {
		return func(ds []decoded) {
			sum(want)(ds)
			for i, d := range ds {
				// Replica i is connection i: to worker i+1, with worker i's PSN.
				j := (i + 1) % ring.n()
				if d.port != port(j) || d.udp.Dst.Addr() != hostIP(top, ring.Hosts[j]) || d.udp.Src.Addr() != hostIP(top, ring.Hosts[i]) ||
					d.pkt.DestQP != ring.QPN[j] || d.pkt.PSN != psn(i, c)&wire.PSNMask || d.pkt.RETH.RKey != ring.RKey[j] ||
					d.pkt.RETH.VA != ring.VA[j]+uint64(c)*uint64(4*k) || d.pkt.Imm&^OverflowFlag != c {
					t.Fatalf("replica %d of chunk %d: port %d %v → %v qp %#x psn %#x va %#x imm %#x", i, c, d.port,
						d.udp.Src, d.udp.Dst, d.pkt.DestQP, d.pkt.PSN, d.pkt.RETH.VA, d.pkt.Imm)
				}
			}
		}
	}
	sum3 := func(a, b, c int32) []int32 {
		x, y, z := constVals(k, a), constVals(k, b), constVals(k, c)
		for i := range x {
			x[i] += y[i] + z[i]
		}
		return x
	}
	b.step("worker 0 contributes chunk 0: kept", port(0), send(0, 0, 1), 0, nil)
	b.step("a copy of worker 0's chunk 0: dropped as a duplicate", port(0), send(0, 0, 1), 0, nil)
	b.step("worker 1 contributes chunk 0 (PSN 0xfffffe): kept", port(1), send(1, 0, 10), 0, nil)
	b.step("worker 2 completes chunk 0: one replica per connection, each with its sender's PSN", port(2), send(2, 0, 100), 3,
		replicasOf(0, sum3(1, 10, 100)))
	b.step("worker 1 retransmits chunk 0: answered on its connection alone", port(1), send(1, 0, 10), 1, func(ds []decoded) {
		sum(sum3(1, 10, 100))(ds)
		if d := ds[0]; d.port != port(2) || d.pkt.PSN != 0xfffffe || d.pkt.DestQP != ring.QPN[2] {
			t.Fatalf("answer on port %d psn %#x qp %#x", d.port, d.pkt.PSN, d.pkt.DestQP)
		}
	})
	b.step("worker 2 contributes chunk 1 first", port(2), send(2, 1, 200), 0, nil)
	b.step("worker 0 contributes chunk 1", port(0), send(0, 1, 2), 0, nil)
	b.step("worker 1 completes chunk 1 (PSN 0xffffff)", port(1), send(1, 1, 20), 3, replicasOf(1, sum3(2, 20, 200)))
	b.step("worker 0 starts chunk 4, which takes chunk 0's cell (2·base + 4 mod 4)", port(0), send(0, 4, 3), 0, nil)
	b.step("worker 2 retransmits chunk 0: its cell moved on, stale", port(2), send(2, 0, 100), 0, nil)
	b.step("worker 1 sends PSN 4 (chunk 6 after the wrap): outside the all-reduce", port(1), send(1, 6, 1), 0, nil)
	big := int32(1 << 30)
	b.step("chunk 5, worker 0 (sums past 2^31)", port(0), send(0, 5, big), 0, nil)
	b.step("chunk 5, worker 1", port(1), send(1, 5, big), 0, nil)
	b.step("chunk 5, worker 2 completes it: the replicas flag the overflow in their immediate", port(2), send(2, 5, big), 3, func(ds []decoded) {
		for _, d := range ds {
			if d.pkt.Imm != 5|OverflowFlag {
				t.Fatalf("overflowed result's immediate %#x", d.pkt.Imm)
			}
		}
	})
	bad := send(0, 2, 7)
	bad[len(bad)-1] ^= 0xff
	b.step("a corrupted packet of worker 0 (ICRC): dropped", port(0), bad, 0, nil)
	src, dst := top.Node("h1"), top.Node("h2")
	h := wire.Header{BTH: wire.BTH{Opcode: wire.WriteOnly, PKey: wire.DefaultPKey, DestQP: ring.QPN[1], AckReq: true, PSN: psn(0, 2)},
		RETH: wire.RETH{VA: ring.VA[1] + 2*uint64(4*k), RKey: ring.RKey[1], Length: uint32(4 * k)}}
	b.step("an RDMA WRITE without immediate on an INA connection: malformed, dropped", port(0), hostFrame(src, dst, &h, valueBytes(constVals(k, 7))), 0, nil)
	b.step("job 9 holds no memory: its packet is dropped", 1, inaFrame(top, idle, 0, 40, 0, constVals(k, 1)), 0, nil)
	ack := wire.Header{BTH: wire.BTH{Opcode: wire.Acknowledge, PKey: wire.DefaultPKey, DestQP: 0x31, PSN: 101}, AETH: wire.AETH{Syndrome: wire.ACKSyndrome(31), MSN: 2}}
	b.step("an acknowledgement from worker 1 to worker 0 is forwarded", port(1), hostFrame(dst, src, &ack, nil), 1, nil)
	ps := wire.Header{BTH: wire.BTH{Opcode: wire.WriteOnlyImm, PKey: wire.DefaultPKey, DestQP: 0x99, AckReq: true, PSN: 1},
		RETH: wire.RETH{VA: 0x9000, RKey: 0x999, Length: uint32(4 * k)}, Imm: 1}
	b.step("a WRITE on another QP (the parameter-server path) is forwarded untouched", 1, hostFrame(src, top.Node("h4"), &ps, valueBytes(constVals(k, 5))), 1,
		func(ds []decoded) {
			if ds[0].port != 4 || ds[0].vals[0] != 5 {
				t.Fatalf("forwarded to port %d with %d", ds[0].port, ds[0].vals[0])
			}
		})
	jc := b.counters(3)
	if jc.Results != 3 || jc.Answers != 1 || jc.Drops[DropDuplicate] != 1 || jc.Drops[DropStale] != 1 || jc.Drops[DropRange] != 1 ||
		jc.Drops[DropICRC] != 1 || jc.Drops[DropMalformed] != 1 || jc.Overflows != 1 {
		t.Fatalf("job 3 counters %+v", jc)
	}
	if jc := b.counters(9); jc.Drops[DropNoBinding] != 1 {
		t.Fatalf("job 9 counters %+v", jc)
	}
	return []*vectorFile{b.v}
}

func (b *vectorBuilder) counters(job uint16) JobCounters {
	b.t.Helper()
	ctl, err := NewController(p4rt.Local(b.p))
	if err != nil {
		b.t.Fatal(err)
	}
	jc, err := ctl.Counters(context.Background(), job)
	if err != nil {
		b.t.Fatal(err)
	}
	return jc
}

// TestVectors replays every vector file on a fresh Go pipeline set up
// from the file alone; -update regenerates the files from the scenarios
// (whose own checks run first).
func TestVectors(t *testing.T) {
	dir := filepath.Join("testdata", "vectors")
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, v := range vectorScenarios(t) {
			data, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, v.Name+".json"), append(data, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files in %s (run go test -update): %v", dir, err)
	}
	for _, path := range files {
		v := readVectorFile(t, path)
		t.Run(v.Name, func(t *testing.T) {
			top := starTopology(t, v.Hosts)
			p := newPipeline(t, top, v.K)
			program(t, p, top, v.Rings, v.Binds)
			for i, s := range v.Steps {
				in, err := hex.DecodeString(s.In)
				if err != nil {
					t.Fatal(err)
				}
				c := newCapture()
				p.Process(0, s.InPort, in, c)
				if !reflect.DeepEqual(c.out, s.Out) {
					t.Fatalf("step %d (%s): frames out differ from %s", i, s.Doc, path)
				}
			}
			// Every frame in is counted once, in a cell P4Runtime reads.
			if fc := frameCounts(t, p); fc.Total() != uint64(len(v.Steps)) {
				t.Errorf("%d frames in, accounted %d: %+v", len(v.Steps), fc.Total(), fc)
			}
		})
	}
}

// frameCounts reads p's frame accounting through P4Runtime.
func frameCounts(t testing.TB, p *Pipeline) FrameCounts {
	t.Helper()
	ctl, err := NewController(p4rt.Local(p))
	if err != nil {
		t.Fatal(err)
	}
	fc, err := ctl.FrameCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return fc
}

// TestVectorsUpToDate requires the files to be what the scenarios make.
func TestVectorsUpToDate(t *testing.T) {
	for _, v := range vectorScenarios(t) {
		got := readVectorFile(t, filepath.Join("testdata", "vectors", v.Name+".json"))
		if !reflect.DeepEqual(normalize(v), normalize(got)) {
			t.Errorf("testdata/vectors/%s.json is not what its scenario makes: run go test ./p4/freeina -update and review", v.Name)
		}
	}
}

func normalize(v *vectorFile) *vectorFile {
	c := *v
	c.Steps = nil
	for _, s := range v.Steps {
		if s.Out == nil {
			s.Out = []vectorPacket{}
		}
		c.Steps = append(c.Steps, s)
	}
	return &c
}

func readVectorFile(t testing.TB, path string) *vectorFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := &vectorFile{}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}
