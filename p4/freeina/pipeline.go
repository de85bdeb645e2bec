// Package freeina is FreeINA's switch data plane (docs/freeina.md): the Go
// twin of freeina.p4, which aggregates the gradients that RDMA reliable
// connections (RC, RoCEv2) carry between hosts without terminating them.
//
// A job's workers form a ring of RC connections, worker i sending to
// worker i+1 through the switch: every chunk of the gradient is one RDMA
// WRITE with immediate of k int32 values (a single packet). The switch
// recognises the packets of these connections (TableConns), adds their
// values into the slot of the job's current all-reduce (TableJobs, the
// all-reduce-level allocation), keeps every contribution but the last,
// and when a chunk is complete sends the sum on every connection of the
// job: one replica per connection, rebuilt with that connection's
// addresses, queue pair, PSN and remote address (TableReplicas), its
// ICRC recomputed. So each receiver's RNIC sees, for each
// PSN its peer sent, exactly one valid RC packet carrying the aggregate:
// the switch delays and rewrites, and never originates a PSN or an
// acknowledgement. Retransmissions of a complete chunk are answered from
// its slot (the shadow copy of SwitchML); duplicates of an incomplete
// chunk, packets of finished chunks whose slot moved on and packets of
// released all-reduces are dropped and counted, which the endpoints'
// go-back-N repairs (the argument is in docs/freeina.md §3).
//
// Everything else — the parameter-server path, acknowledgements, the
// connection manager — is forwarded by the wrapped forwarding pipeline.
package freeina

import (
	"encoding/binary"
	"fmt"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// Frame offsets of INA packets (IPv4 without options).
const (
	offTTL     = 22
	offIPCsum  = 24
	offSrcIP   = 26
	offDstIP   = 30
	offSrcPort = 34
	offDstPort = 36
	offUDPLen  = 38
	offOpcode  = 42
	offBTHFlag = 43 // SE, M, pad count, TVer
	offQPN     = 47
	offPSN     = 51
	offVA      = 54
	offRKey    = 62
	offDMALen  = 66
	offImm     = 70
	offValues  = 74
)

type connKey struct {
	src, dst [4]byte
	qpn      uint32
}

// conn is an entry of TableConns.
type conn struct {
	job    uint16
	worker uint8
	psn    uint32 // of chunk 0 of the current all-reduce (ParamPSN)
}

// binding is a job's entry of TableJobs.
type binding struct {
	gen, base, size, chunks uint32
	workers                 uint8
	group                   uint16
}

// replica is an entry of TableReplicas: how the copy of a result for one
// connection is addressed.
type replica struct {
	psn        uint32 // of chunk 0 on the connection (ParamPSN)
	src, dst   [4]byte
	sport      uint16
	qpn, rkey  uint32
	va         uint64
	dmac, smac frame.MAC
}

type groupReplica struct {
	port, instance uint32
}

type counterCell struct{ pk, by uint64 }

func (c *counterCell) add(bytes int) {
	c.pk++
	c.by += uint64(bytes)
}

// Pipeline is the FreeINA switch data plane. It implements
// emulator.Pipeline and p4rt.Device (device.go); like every pipeline it is
// not safe for concurrent use (the substrate serializes packets and
// control calls).
type Pipeline struct {
	cfg  Config
	k    int
	fwd  *fwd.Pipeline
	info *p4configv1.P4Info
	rt   *p4rt.Target

	conns    map[connKey]*conn
	jobs     [MaxJobs]*binding
	groups   map[uint16][]groupReplica
	replicas map[uint32]*replica // group<<16 | rid

	// Cells, two per slot; values[cell*k+i].
	bitmap, gen, chunk []uint32
	count, ovf         []uint8
	values             []int32

	packets, aggregated, held, results, answers, overflows [MaxJobs]counterCell
	jobDrops                                               [MaxJobs * NumJobDrops]counterCell

	// NoReplica counts result copies dropped for lack of a group or a
	// replica entry (a Go-only statistic).
	NoReplica uint64
}

var (
	_ emulator.Pipeline = (*Pipeline)(nil)
	_ p4rt.Device       = (*Pipeline)(nil)
)

// New returns the FreeINA pipeline of a switch, wrapping its forwarding
// pipeline.
func New(cfg Config, f *fwd.Pipeline) (*Pipeline, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	info, err := P4Info(cfg)
	if err != nil {
		return nil, err
	}
	cells := 2 * cfg.Slots
	p := &Pipeline{
		cfg: cfg, k: cfg.K, fwd: f, info: info,
		conns: map[connKey]*conn{}, groups: map[uint16][]groupReplica{}, replicas: map[uint32]*replica{},
		bitmap: make([]uint32, cells), gen: make([]uint32, cells), chunk: make([]uint32, cells),
		count: make([]uint8, cells), ovf: make([]uint8, cells), values: make([]int32, cells*cfg.K),
	}
	t, err := p4rt.NewTarget(info)
	if err != nil {
		return nil, err
	}
	if err := p.bind(t); err != nil {
		return nil, err
	}
	p.rt = t
	return p, nil
}

// SimPipeline returns a sim.Options.Pipeline function that runs FreeINA
// with k values per packet on every switch, its slots the SRAM of the
// switch's aggregators (SlotsFor).
func SimPipeline(k int) func(sw *topologies.Node, f *fwd.Pipeline) (emulator.Pipeline, error) {
	return func(sw *topologies.Node, f *fwd.Pipeline) (emulator.Pipeline, error) {
		return New(Config{K: k, Slots: SlotsFor(sw.Aggregators, k)}, f)
	}
}

// Config returns the pipeline's configuration.
func (p *Pipeline) Config() Config { return p.cfg }

// Forwarding returns the wrapped forwarding pipeline.
func (p *Pipeline) Forwarding() *fwd.Pipeline { return p.fwd }

// Process implements emulator.Pipeline.
func (p *Pipeline) Process(now time.Duration, in int, f []byte, out emulator.Emitter) {
	if c := p.connOf(in, f); c != nil {
		p.ina(in, c, f, out)
		return
	}
	p.fwd.Process(now, in, f, out)
}

// connOf returns the INA connection a RoCEv2 frame belongs to, or nil.
func (p *Pipeline) connOf(in int, f []byte) *conn {
	if in == emulator.CPUPort || len(p.conns) == 0 || len(f) < offPSN+3 ||
		binary.BigEndian.Uint16(f[12:]) != frame.EtherTypeIPv4 || f[frame.EthLen] != 0x45 ||
		f[frame.EthLen+9] != frame.ProtoUDP || binary.BigEndian.Uint16(f[frame.EthLen+6:])&0x3fff != 0 ||
		binary.BigEndian.Uint16(f[offDstPort:]) != wire.Port {
		return nil
	}
	return p.conns[connKey{src: [4]byte(f[offSrcIP:]), dst: [4]byte(f[offDstIP:]), qpn: get24(f[offQPN:])}]
}

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

func (p *Pipeline) jobDrop(job, reason int) { p.jobDrops[job*NumJobDrops+reason].pk++ }

// wellFormed reports whether f is an INA packet as the hosts send it: an
// RDMA WRITE only with immediate of exactly k values, no pad, transport
// version 0, lengths consistent; it returns the frame without Ethernet
// padding.
func (p *Pipeline) wellFormed(f []byte) ([]byte, bool) {
	ipLen := int(binary.BigEndian.Uint16(f[frame.EthLen+2:]))
	want := frame.IPv4Len + frame.UDPLen + HeaderLen + 4*p.k + wire.ICRCLen
	if ipLen != want || len(f) < frame.EthLen+ipLen ||
		int(binary.BigEndian.Uint16(f[offUDPLen:])) != ipLen-frame.IPv4Len ||
		wire.Opcode(f[offOpcode]) != wire.WriteOnlyImm || f[offBTHFlag]&0x3f != 0 ||
		binary.BigEndian.Uint32(f[offDMALen:]) != uint32(4*p.k) {
		return f, false
	}
	return f[:frame.EthLen+ipLen], true
}

// ina handles a packet of an INA connection.
func (p *Pipeline) ina(in int, c *conn, f []byte, out emulator.Emitter) {
	j := int(c.job)
	p.packets[j].add(len(f))
	f, ok := p.wellFormed(f)
	if !ok {
		p.jobDrop(j, DropMalformed)
		return
	}
	if wire.VerifyFrame(f) != nil {
		p.jobDrop(j, DropICRC)
		return
	}
	b := p.jobs[j]
	if b == nil {
		p.jobDrop(j, DropNoBinding)
		return
	}
	if c.worker >= b.workers {
		p.jobDrop(j, DropInconsistent)
		return
	}
	chunk := (get24(f[offPSN:]) - c.psn) & wire.PSNMask
	if chunk >= b.chunks {
		p.jobDrop(j, DropRange)
		return
	}
	cell := int(2*b.base + chunk%(2*b.size))
	bit := uint32(1) << c.worker
	switch {
	case p.gen[cell] != b.gen || p.chunk[cell] < chunk:
		p.start(cell, b.gen, chunk, bit, j, f)
	case p.chunk[cell] > chunk:
		p.jobDrop(j, DropStale)
		return
	case p.bitmap[cell]&bit != 0:
		if p.count[cell] != b.workers {
			p.jobDrop(j, DropDuplicate)
			return
		}
		// A retransmission of a complete chunk: its receiver has not
		// acknowledged it, so it gets the aggregate again, on this
		// connection alone, with the sender's own headers.
		p.fill(cell, f)
		p.finish(f)
		p.answers[j].add(len(f))
		p.fwd.ForwardFrom(in, f, -1, out)
		return
	default:
		p.add(cell, bit, j, f)
	}
	if p.count[cell] < b.workers {
		p.held[j].pk++ // kept: its replica leaves when the chunk completes
		return
	}
	if p.ovf[cell] != 0 {
		p.overflows[j].pk++
	}
	p.results[j].add(len(f))
	p.fill(cell, f)
	if !frame.DecTTL(f) {
		p.jobDrop(j, DropTTL) // counted once, with the job's frames
		return
	}
	p.multicast(j, b, chunk, f, out)
}

// start makes the packet the first contribution of cell.
func (p *Pipeline) start(cell int, gen, chunk, bit uint32, job int, f []byte) {
	p.gen[cell], p.chunk[cell] = gen, chunk
	p.bitmap[cell], p.count[cell], p.ovf[cell] = bit, 1, 0
	v := f[offValues:]
	for i := range p.values[cell*p.k : (cell+1)*p.k] {
		p.values[cell*p.k+i] = int32(binary.BigEndian.Uint32(v[4*i:]))
	}
	p.aggregated[job].add(4 * p.k)
}

// add adds the packet's values into cell, detecting int32 overflow.
func (p *Pipeline) add(cell int, bit uint32, job int, f []byte) {
	acc := p.values[cell*p.k : (cell+1)*p.k]
	v := f[offValues : offValues+4*len(acc)]
	var ovf int32
	for i, a := range acc {
		b := int32(binary.BigEndian.Uint32(v[4*i:]))
		s := a + b
		ovf |= (a ^ s) & (b ^ s)
		acc[i] = s
	}
	if ovf < 0 {
		p.ovf[cell] = 1
	}
	p.bitmap[cell] |= bit
	p.count[cell]++
	p.aggregated[job].add(4 * p.k)
}

// fill writes cell's sum into the packet's values and flags an overflow
// in its immediate.
func (p *Pipeline) fill(cell int, f []byte) {
	v := f[offValues:]
	for i, x := range p.values[cell*p.k : (cell+1)*p.k] {
		binary.BigEndian.PutUint32(v[4*i:], uint32(x))
	}
	if p.ovf[cell] != 0 {
		f[offImm] |= 0x80
	}
}

// finish makes a rewritten frame valid again: no UDP checksum (RoCEv2
// allows none), a new ICRC.
func (p *Pipeline) finish(f []byte) {
	frame.ClearUDPChecksum(f)
	if err := wire.SetFrameICRC(f); err != nil {
		panic("freeina: a checked INA frame lost its RoCEv2 form: " + err.Error()) // cannot happen: lengths were checked
	}
}

// multicast sends the result in f on every connection of the job: one
// copy per replica of its group, rebuilt for that connection.
func (p *Pipeline) multicast(job int, b *binding, chunk uint32, f []byte, out emulator.Emitter) {
	reps := p.groups[b.group]
	if len(reps) == 0 {
		p.NoReplica++
		return
	}
	prio := int(frame.TOS(f) >> 5)
	for _, gr := range reps {
		r := p.replicas[uint32(b.group)<<16|gr.instance]
		if r == nil {
			p.NoReplica++
			continue
		}
		// A frame of its own from the substrate's pool, where it has one.
		c := append(emulator.NewFrame(out, len(f)), f...)
		frame.SetMACs(c, r.smac, r.dmac)
		copy(c[offSrcIP:], r.src[:])
		copy(c[offDstIP:], r.dst[:])
		binary.BigEndian.PutUint16(c[offIPCsum:], 0)
		binary.BigEndian.PutUint16(c[offIPCsum:], frame.Checksum(c[frame.EthLen:frame.EthLen+frame.IPv4Len]))
		binary.BigEndian.PutUint16(c[offSrcPort:], r.sport)
		put24(c[offQPN:], r.qpn)
		put24(c[offPSN:], (r.psn+chunk)&wire.PSNMask)
		binary.BigEndian.PutUint64(c[offVA:], r.va+uint64(chunk)*uint64(4*p.k))
		binary.BigEndian.PutUint32(c[offRKey:], r.rkey)
		p.finish(c)
		out.Emit(int(gr.port), prio, c)
	}
}

// Cell is the content of one cell, as a test or a controller reads it.
type Cell struct {
	Gen, Chunk, Bitmap uint32
	Count, Overflow    uint8
	Values             []int32
}

// ReadCell returns cell i (Go only; controllers read the registers).
func (p *Pipeline) ReadCell(i int) (Cell, error) {
	if i < 0 || i >= len(p.gen) {
		return Cell{}, fmt.Errorf("freeina: cell %d of %d", i, len(p.gen))
	}
	return Cell{Gen: p.gen[i], Chunk: p.chunk[i], Bitmap: p.bitmap[i], Count: p.count[i], Overflow: p.ovf[i],
		Values: append([]int32(nil), p.values[i*p.k:(i+1)*p.k]...)}, nil
}
