package ina

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"net/netip"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/frame"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/fwd"
	"github.com/tracebed/tracebed/topologies"
)

// Frame offsets of INA packets (IPv4 without options).
const (
	offTOS       = 15
	offTTL       = 22
	offIPCsum    = 24
	offSrcIP     = 26
	offDstIP     = 30
	offSrcPort   = 34
	offDstPort   = 36
	offUDPCsum   = 40
	offINA       = frame.HeaderLen
	offValues    = offINA + HeaderLen
	generatedTTL = 64
)

// Pipeline is the INA switch data plane, the Go twin of ina.p4. It claims
// UDP frames addressed to the switch's own IP on the INA port and forwards
// everything else with the wrapped forwarding pipeline, counting every
// frame it receives once (CounterForwarded, CounterDrops or a job's
// CounterPackets). It implements emulator.Pipeline and p4rt.Device; like
// every pipeline it is not safe for concurrent use (the substrate
// serializes packets and control calls).
type Pipeline struct {
	cfg  Config
	k    int
	fwd  *fwd.Pipeline
	self [4]byte
	info *p4configv1.P4Info

	// Aggregator cells, 2 per aggregator; values[cell*k+j].
	bitmap, gen, round, offset []uint32
	count, ovf                 []uint8
	values                     []int32

	jobRound, jobWorkers, jobEpoch [MaxJobs]uint32
	progress                       [MaxJobs * ProgressCells]counterCell
	held                           []counterCell // CounterHeld: per cell, the flips of count ≠ 0

	jobs     [MaxJobs][]*jobEntry // by job id, highest priority first
	rt       *p4rt.Target         // the P4Runtime view (device.go)
	groups   map[uint16]*group
	replicas map[uint32]*replica // group<<16 | rid

	packets, aggregated, results [MaxJobs]counterCell
	collisions, overflows        [MaxJobs]counterCell
	upward                       [MaxJobs]counterCell
	jobDrops                     [MaxJobs * NumJobDrops]counterCell
	drops                        [NumDrops]counterCell
	forwarded                    [1]counterCell

	// NoReplica counts multicast copies dropped for lack of a replica entry.
	NoReplica uint64

	// Occupancy: per cell, whether it holds a partial aggregate, since when
	// and for which job; per job, the time its cells held partials.
	now      time.Duration
	holdOpen []bool
	holdFrom []time.Duration
	holdJob  []uint16
	hold     [MaxJobs]time.Duration
}

type counterCell struct{ pk, by uint64 }

// jobEntry is a decoded binding of the job table.
type jobEntry struct {
	job     uint16
	lo, hi  uint32
	prio    int32
	mode    uint8
	gen     uint32
	base    uint32
	size    uint32
	workers uint8
	all     uint32 // every worker of the job
	members uint32 // the workers this switch completes (all at the top)
	group   uint16
	psIP    [4]byte
	psPort  uint16
	up      [4]byte // the switch above (hasUp)
	hasUp   bool
	hold    uint8
	place   uint8
	epoch   uint32
}

type group struct {
	reps []groupReplica
}

type groupReplica struct {
	port, instance uint32
}

type replica struct {
	ip   [4]byte
	port uint16
	dmac frame.MAC
	smac frame.MAC
}

var _ emulator.Pipeline = (*Pipeline)(nil)
var _ p4rt.Device = (*Pipeline)(nil)

// New returns the INA pipeline of a switch, wrapping its forwarding
// pipeline, which forwards the frames the INA pipeline does not consume.
func New(cfg Config, f *fwd.Pipeline) (*Pipeline, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if !f.Self().Is4() {
		return nil, fmt.Errorf("ina: switch address %v is not IPv4", f.Self())
	}
	info, err := P4Info(cfg)
	if err != nil {
		return nil, err
	}
	cells := 2 * cfg.Aggregators
	p := &Pipeline{
		cfg: cfg, k: cfg.K, fwd: f, self: f.Self().As4(), info: info,
		bitmap: make([]uint32, cells), gen: make([]uint32, cells),
		round: make([]uint32, cells), offset: make([]uint32, cells),
		count: make([]uint8, cells), ovf: make([]uint8, cells), held: make([]counterCell, cells),
		values:   make([]int32, cells*cfg.K),
		holdOpen: make([]bool, cells), holdFrom: make([]time.Duration, cells), holdJob: make([]uint16, cells),
		groups:   map[uint16]*group{},
		replicas: map[uint32]*replica{},
	}
	t, err := p4rt.NewTarget(info)
	if err != nil {
		return nil, err
	}
	p.rt = t
	if err := p.bind(t); err != nil {
		return nil, err
	}
	return p, nil
}

// Config returns the pipeline's configuration.
func (p *Pipeline) Config() Config { return p.cfg }

// Forwarding returns the wrapped forwarding pipeline.
func (p *Pipeline) Forwarding() *fwd.Pipeline { return p.fwd }

// Process implements emulator.Pipeline: as ina.p4, it drops what is not
// IPv4, handles what is addressed to the switch (local) and forwards the
// rest.
func (p *Pipeline) Process(now time.Duration, in int, f []byte, out emulator.Emitter) {
	if in == emulator.CPUPort {
		p.fwd.Process(now, in, f, out) // a packet-out: the forwarding pipeline's
		return
	}
	if !frame.IsIPv4(f) {
		p.drops[DropNotIPv4].pk++
		return
	}
	if [4]byte(f[offDstIP:offDstIP+4]) == p.self {
		p.local(now, f, out)
		return
	}
	switch p.fwd.ForwardFrom(in, f, -1, out) {
	case fwd.Forwarded:
		p.forwarded[0].pk++
	case fwd.DropTTL:
		p.drops[DropTTL].pk++
	default:
		p.drops[DropTransitNoRoute].pk++
	}
}

// local handles frames addressed to the switch. The checks come in
// ina.p4's order: an INA packet at all (DropNotINA), its lengths and k
// (DropMalformed), its UDP checksum (DropChecksum), its header (Parse:
// DropMalformed), its binding (DropNoJob).
func (p *Pipeline) local(now time.Duration, f []byte, out emulator.Emitter) {
	p.now = now
	if frame.Proto(f) != frame.ProtoUDP || len(f) < offValues || f[frame.EthLen] != 0x45 ||
		binary.BigEndian.Uint16(f[frame.EthLen+6:])&0x1fff != 0 || // a fragment
		binary.BigEndian.Uint16(f[offDstPort:]) != p.cfg.Port {
		p.drops[DropNotINA].pk++
		return
	}
	udpLen := int(binary.BigEndian.Uint16(f[frame.EthLen+frame.IPv4Len+4:]))
	ipLen := int(binary.BigEndian.Uint16(f[frame.EthLen+2:]))
	if udpLen != ipLen-frame.IPv4Len || frame.EthLen+ipLen != len(f) ||
		udpLen != frame.UDPLen+HeaderLen+4*p.k || int(binary.BigEndian.Uint16(f[offINA+10:])) != p.k {
		p.drops[DropMalformed].pk++
		return
	}
	if present, ok := frame.UDPChecksum(f); !present || !ok {
		p.drops[DropChecksum].pk++
		return
	}
	h, vals, err := Parse(f[offINA:])
	if err != nil {
		p.drops[DropMalformed].pk++
		return
	}
	e := p.lookup(h.Job, h.Round)
	if e == nil {
		p.drops[DropNoJob].pk++
		return
	}
	j := int(h.Job)
	p.packets[j].pk++
	p.packets[j].by += uint64(len(f))
	if h.Workers != e.workers {
		p.jobDrop(j, DropInconsistent)
		return
	}
	switch {
	case h.Flags&(FlagData|FlagPartial) != 0:
		if h.Bitmap&^e.members != 0 {
			// Not a contributor this switch completes (a worker of
			// another rack of a two-level tree).
			p.jobDrop(j, DropInconsistent)
			return
		}
		p.noteProgress(j, e.epoch, h.Round, h.Bitmap)
		if e.mode == ModePool {
			p.poolData(e, &h, vals, f, out)
		} else {
			p.sharedData(e, &h, vals, f, out)
		}
	case e.psPort != 0 && [4]byte(f[offSrcIP:offSrcIP+4]) == e.psIP && binary.BigEndian.Uint16(f[offSrcPort:]) == e.psPort:
		// A result from the job's parameter server (shared mode).
		p.release(e, &h)
		p.multicast(e, f, out)
	case e.hasUp && [4]byte(f[offSrcIP:offSrcIP+4]) == e.up && binary.BigEndian.Uint16(f[offSrcPort:]) == p.cfg.Port:
		// A result from the switch above (two-level aggregation).
		if e.mode == ModePool {
			p.keepResult(e, &h, vals)
		} else {
			p.release(e, &h)
		}
		p.multicast(e, f, out)
	default:
		p.jobDrop(j, DropNotFromPS)
	}
}

func (p *Pipeline) jobDrop(job, reason int) { p.jobDrops[job*NumJobDrops+reason].pk++ }

// lookup returns the highest-priority binding of job whose range holds round.
func (p *Pipeline) lookup(job uint16, round uint32) *jobEntry {
	for _, e := range p.jobs[job] {
		if e.lo <= round && round <= e.hi {
			return e
		}
	}
	return nil
}

// chunkCmp orders chunks by (round, offset), rounds as serial numbers.
func chunkCmp(r1, o1, r2, o2 uint32) int {
	if d := int32(r1 - r2); d != 0 {
		if d > 0 {
			return 1
		}
		return -1
	}
	switch {
	case o1 > o2:
		return 1
	case o1 < o2:
		return -1
	}
	return 0
}

// poolCell returns the pool-mode cell of a packet: copy ver of aggregator
// base+slot.
func poolCell(e *jobEntry, h *Header) int { return 2*int(e.base+uint32(h.Slot)) + int(h.Ver) }

// newer compares the packet's chunk with what pool cell c holds: 1 when
// the cell is another binding's or holds an older chunk, 0 for the same
// chunk, -1 when it holds a newer one.
func (p *Pipeline) newer(c int, e *jobEntry, h *Header) int {
	if p.gen[c] != e.gen {
		return 1
	}
	return chunkCmp(h.Round, h.Offset, p.round[c], p.offset[c])
}

// poolData handles a contribution of a job in pool mode (SwitchML): a
// worker's data, or, at the top of a two-level tree, a rack's partial.
func (p *Pipeline) poolData(e *jobEntry, h *Header, vals, f []byte, out emulator.Emitter) {
	j := int(h.Job)
	if uint32(h.Slot) >= e.size {
		p.jobDrop(j, DropBadSlot)
		return
	}
	c := poolCell(e, h)
	switch d := p.newer(c, e, h); {
	case d > 0:
		p.start(c, e.gen, h, vals)
	case d < 0:
		p.jobDrop(j, DropStale)
		return
	case p.bitmap[c]&h.Bitmap != 0:
		switch {
		case p.bitmap[c] == e.all:
			// A retransmission (or copy) of a finished chunk: answer the
			// sender alone from this copy, which holds the result
			// (computed here, or kept from the switch above).
			p.fillResult(c, e, f)
			p.swapToSender(f)
			p.results[j].pk++
			p.results[j].by += uint64(len(f))
			p.route(j, f, out)
		case e.hasUp && p.bitmap[c] == e.members && h.Flags&FlagRetransmit != 0:
			// This switch's part went up and no result came back (the
			// partial or the result was lost): send the partial again.
			p.up(c, e, f, FlagRetransmit, out)
		default:
			p.jobDrop(j, DropDuplicate)
		}
		return
	default:
		p.add(c, h, vals)
	}
	if p.bitmap[c] != e.members {
		return
	}
	if e.hasUp {
		p.closeHold(c)
		p.up(c, e, f, 0, out)
		return
	}
	p.complete(c, e)
	p.fillResult(c, e, f)
	p.multicast(e, f, out)
}

// keepResult stores a result from the switch above in its pool cell, so
// that the workers' retransmissions are answered here; a cell that moved
// on to a newer chunk is left alone.
func (p *Pipeline) keepResult(e *jobEntry, h *Header, vals []byte) {
	if uint32(h.Slot) >= e.size {
		return
	}
	c := poolCell(e, h)
	if p.newer(c, e, h) < 0 {
		return
	}
	p.closeHold(c)
	p.gen[c], p.round[c], p.offset[c], p.bitmap[c] = e.gen, h.Round, h.Offset, e.all
	p.ovf[c] = 0
	if h.Flags&FlagOverflow != 0 {
		p.ovf[c] = 1
	}
	GetValues(p.values[c*p.k:(c+1)*p.k], vals)
}

// sharedData handles a contribution of a job in shared mode (ATP).
func (p *Pipeline) sharedData(e *jobEntry, h *Header, vals, f []byte, out emulator.Emitter) {
	j := int(h.Job)
	c := sharedCell(e, h)
	retx := h.Flags&FlagRetransmit != 0
	mine := p.count[c] != 0 && p.gen[c] == e.gen && p.round[c] == h.Round && p.offset[c] == h.Offset
	switch {
	case p.count[c] == 0 || (p.gen[c] == e.gen && int32(h.Round-p.round[c]) > 0):
		// Free, or held by a stale partial of an older round of this binding.
		if retx {
			// A retransmission never claims a cell: it goes on to where
			// the rest of its chunk may be (docs/ina-dataplane.md).
			p.closeHold(c)
			p.setCount(c, 0)
			p.onward(e, f, out)
			return
		}
		p.start(c, e.gen, h, vals)
	case mine && p.bitmap[c] == e.members:
		// Complete, held until its result returns (HoldReturn): a
		// retransmission means the result was lost; send it on again.
		if !retx {
			p.jobDrop(j, DropDuplicate)
			return
		}
		p.sendComplete(c, e, f, FlagRetransmit, out)
		return
	case mine:
		if p.bitmap[c]&h.Bitmap == 0 {
			p.add(c, h, vals)
		} else if !retx {
			p.jobDrop(j, DropDuplicate)
			return
		}
		if p.bitmap[c] != e.members && retx {
			// Flush the partial aggregate on (to the switch above, or to
			// the parameter server) and free the cell.
			p.fill(c, f)
			f[offINA+1] = FlagPartial | FlagRetransmit | p.ovfFlag(c)
			binary.BigEndian.PutUint32(f[offINA+20:], p.bitmap[c])
			p.closeHold(c)
			p.setCount(c, 0)
			p.onward(e, f, out)
			return
		}
	default:
		// Held by another chunk: a collision. A retransmission at a lower
		// switch goes up, where its chunk may be held; anything else goes
		// to the parameter server.
		if retx && e.hasUp {
			p.onward(e, f, out)
			return
		}
		p.toPS(e, f, FlagCollision, out)
		return
	}
	if p.bitmap[c] == e.members {
		p.sendComplete(c, e, f, 0, out)
		if e.hold == HoldCompletion {
			p.setCount(c, 0) // freed when its result (or partial) is sent
		}
	}
}

// sendComplete sends on the complete aggregate of shared-mode cell c: a
// lower switch's partial up, the top's result to the parameter server.
func (p *Pipeline) sendComplete(c int, e *jobEntry, f []byte, flags uint8, out emulator.Emitter) {
	if e.hold == HoldCompletion {
		p.closeHold(c)
	}
	if e.hasUp {
		p.up(c, e, f, flags, out)
		return
	}
	if flags == 0 && p.ovf[c] != 0 {
		p.overflows[e.job].pk++
	}
	p.fillResult(c, e, f)
	p.toPS(e, f, flags, out)
}

// release frees the shared-mode cell that holds the chunk of a result
// passing back through the switch (HoldReturn only).
func (p *Pipeline) release(e *jobEntry, h *Header) {
	if e.mode != ModeShared || e.hold != HoldReturn {
		return
	}
	c := sharedCell(e, h)
	if p.count[c] != 0 && p.gen[c] == e.gen && p.round[c] == h.Round && p.offset[c] == h.Offset {
		p.closeHold(c)
		p.setCount(c, 0)
	}
}

// onward sends a packet the switch does not keep where its chunk goes on:
// up the job's tree from a lower switch, to the parameter server from the
// top (a retransmission or collision there).
func (p *Pipeline) onward(e *jobEntry, f []byte, out emulator.Emitter) {
	if e.hasUp {
		j := int(binary.BigEndian.Uint16(f[offINA+2:]))
		setIP(f, p.self, e.up, p.cfg.Port, p.cfg.Port)
		p.upward[j].pk++
		p.upward[j].by += uint64(len(f))
		p.route(j, f, out)
		return
	}
	var flags uint8
	if f[offINA+1]&FlagPartial == 0 {
		flags = FlagCollision
	}
	p.toPS(e, f, flags, out)
}

// up sends cell c's aggregate up the job's tree as a partial with the
// switch's members.
func (p *Pipeline) up(c int, e *jobEntry, f []byte, flags uint8, out emulator.Emitter) {
	p.fill(c, f)
	f[offINA+1] = FlagPartial | flags | p.ovfFlag(c)
	binary.BigEndian.PutUint32(f[offINA+20:], p.bitmap[c])
	p.onward(e, f, out)
}

// sharedCell returns the shared-mode cell of a packet's chunk: copy 0 of
// the aggregator its slot field names (PlaceSlot) or its chunk hashes to.
func sharedCell(e *jobEntry, h *Header) int {
	if e.place == PlaceSlot {
		return 2 * int(e.base+uint32(h.Slot)%e.size)
	}
	return 2 * int(e.base+SharedIndex(h.Job, h.Offset, e.size))
}

// SharedIndex is the pool-relative aggregator of a chunk in shared mode:
// CRC-32 (IEEE) of the big-endian job and offset, modulo the pool size, as
// v1model's hash(…, HashAlgorithm.crc32, 0, {job, offset}, size) computes it.
func SharedIndex(job uint16, offset uint32, size uint32) uint32 {
	c := ^uint32(0)
	for _, x := range [6]byte{byte(job >> 8), byte(job), byte(offset >> 24), byte(offset >> 16), byte(offset >> 8), byte(offset)} {
		c = crcTable[byte(c)^x] ^ c>>8
	}
	return ^c % size
}

// crcTable is the CRC-32 (IEEE) table; read-only.
var crcTable = crc32.MakeTable(crc32.IEEE)

// start makes the packet the first contribution of cell c.
func (p *Pipeline) start(c int, gen uint32, h *Header, vals []byte) {
	p.closeHold(c) // an abandoned partial, if any
	p.holdOpen[c], p.holdFrom[c], p.holdJob[c] = true, p.now, h.Job
	p.gen[c], p.round[c], p.offset[c] = gen, h.Round, h.Offset
	p.bitmap[c], p.ovf[c] = h.Bitmap, 0
	p.setCount(c, 1)
	if h.Flags&FlagOverflow != 0 {
		p.ovf[c] = 1 // a partial aggregate that already overflowed
	}
	GetValues(p.values[c*p.k:(c+1)*p.k], vals)
	p.aggregated[h.Job].pk++
	p.aggregated[h.Job].by += uint64(4 * p.k)
}

// add adds the packet's values into cell c, detecting int32 overflow.
func (p *Pipeline) add(c int, h *Header, vals []byte) {
	acc := p.values[c*p.k : (c+1)*p.k]
	var ovf int32
	vals = vals[:4*len(acc)]
	for i, a := range acc {
		b := int32(binary.BigEndian.Uint32(vals))
		vals = vals[4:]
		s := a + b
		ovf |= (a ^ s) & (b ^ s)
		acc[i] = s
	}
	if ovf < 0 || h.Flags&FlagOverflow != 0 {
		p.ovf[c] = 1
	}
	p.bitmap[c] |= h.Bitmap
	p.setCount(c, p.count[c]+1)
	p.aggregated[h.Job].pk++
	p.aggregated[h.Job].by += uint64(4 * p.k)
}

// closeHold ends the partial aggregate held in cell c, if any.
func (p *Pipeline) closeHold(c int) {
	if p.holdOpen[c] {
		p.holdOpen[c] = false
		p.hold[p.holdJob[c]] += p.now - p.holdFrom[c]
	}
}

// HoldTime returns the aggregator time the job's partial aggregates have
// occupied switch memory so far: for every cell, from a chunk's first
// contribution to its completion (or its flush to the parameter server, or
// its abandonment), summed. Divided by aggregators × elapsed time it is
// DESIGN.md's mem_util. It is a Go-only statistic, not a P4 object.
func (p *Pipeline) HoldTime(job uint16) time.Duration {
	if job >= MaxJobs {
		return 0
	}
	return p.hold[job]
}

func (p *Pipeline) complete(c int, e *jobEntry) {
	p.closeHold(c)
	if p.ovf[c] != 0 {
		p.overflows[e.job].pk++
	}
}

func (p *Pipeline) ovfFlag(c int) uint8 {
	if p.ovf[c] != 0 {
		return FlagOverflow
	}
	return 0
}

// fill writes cell c's values into frame f.
func (p *Pipeline) fill(c int, f []byte) {
	PutValues(f[offValues:], p.values[c*p.k:(c+1)*p.k])
}

// fillResult turns f into the result of cell c.
func (p *Pipeline) fillResult(c int, e *jobEntry, f []byte) {
	p.fill(c, f)
	f[offINA+1] = FlagResult | p.ovfFlag(c)
	binary.BigEndian.PutUint32(f[offINA+20:], e.all)
}

// setIP rewrites the addressing of an INA frame the switch sends, with its
// IPv4 and UDP checksums: the last step before a frame leaves, after its
// INA header and values are final.
func setIP(f []byte, src, dst [4]byte, sport, dport uint16) {
	copy(f[offSrcIP:], src[:])
	copy(f[offDstIP:], dst[:])
	f[offTTL] = generatedTTL
	binary.BigEndian.PutUint16(f[offSrcPort:], sport)
	binary.BigEndian.PutUint16(f[offDstPort:], dport)
	binary.BigEndian.PutUint16(f[offIPCsum:], 0)
	binary.BigEndian.PutUint16(f[offIPCsum:], frame.Checksum(f[frame.EthLen:frame.EthLen+frame.IPv4Len]))
	frame.SetUDPChecksum(f)
}

// swapToSender readdresses f from the switch to the sender of f.
func (p *Pipeline) swapToSender(f []byte) {
	src := [4]byte(f[offSrcIP : offSrcIP+4])
	sport := binary.BigEndian.Uint16(f[offSrcPort:])
	setIP(f, p.self, src, p.cfg.Port, sport)
}

// toPS readdresses f to the job's parameter server, adds flags and routes it.
func (p *Pipeline) toPS(e *jobEntry, f []byte, flags uint8, out emulator.Emitter) {
	j := int(binary.BigEndian.Uint16(f[offINA+2:]))
	if e.psPort == 0 {
		p.jobDrop(j, DropNoPS)
		return
	}
	f[offINA+1] |= flags
	if flags&FlagCollision != 0 {
		p.collisions[j].pk++
	}
	setIP(f, p.self, e.psIP, p.cfg.Port, e.psPort)
	p.route(j, f, out)
}

// route sends a frame the switch generated for job towards its
// destination; one without a route is the job's drop.
func (p *Pipeline) route(job int, f []byte, out emulator.Emitter) {
	if p.fwd.ForwardFrom(0, f, -1, out) != fwd.Forwarded {
		p.jobDrop(job, DropNoRoute)
	}
}

// multicast sends one copy of f to every member of the job's group, each
// rewritten by its replica entry.
func (p *Pipeline) multicast(e *jobEntry, f []byte, out emulator.Emitter) {
	j := int(binary.BigEndian.Uint16(f[offINA+2:]))
	p.results[j].pk++ // one result, however many copies
	p.results[j].by += uint64(len(f))
	g := p.groups[e.group]
	if g == nil || len(g.reps) == 0 {
		p.NoReplica++
		return
	}
	prio := int(f[offTOS] >> 5)
	last := len(g.reps) - 1
	// The last copy is f itself; every other one is a frame of its own,
	// from the substrate's pool where it has one. The copies differ only
	// in their destination: the first one's checksums are summed, the
	// others' patched from them.
	var first addressing
	for i, gr := range g.reps {
		r := p.replicas[uint32(e.group)<<16|gr.instance]
		if r == nil {
			p.NoReplica++
			continue
		}
		c := f
		if i != last {
			c = append(emulator.NewFrame(out, len(f)), f...)
		}
		if first.set {
			first.readdress(c, p.self, r.ip, p.cfg.Port, r.port)
		} else {
			setIP(c, p.self, r.ip, p.cfg.Port, r.port)
			first = addressingOf(c)
		}
		frame.SetMACs(c, r.smac, r.dmac)
		out.Emit(int(gr.port), prio, c)
	}
}

// addressing is what readdress needs of a frame setIP readdressed: its
// destination and checksums.
type addressing struct {
	set           bool
	dst           [4]byte
	dport         uint16
	ipSum, udpSum uint16
}

func addressingOf(f []byte) addressing {
	return addressing{set: true, dst: [4]byte(f[offDstIP : offDstIP+4]), dport: binary.BigEndian.Uint16(f[offDstPort:]),
		ipSum: binary.BigEndian.Uint16(f[offIPCsum:]), udpSum: binary.BigEndian.Uint16(f[offUDPCsum:])}
}

// readdress does to c what setIP does, for a frame whose content, save
// its destination, is that of the frame a was taken from: it patches a's
// checksums for the new destination (RFC 1624) instead of summing the
// frame again.
func (a *addressing) readdress(c []byte, src, dst [4]byte, sport, dport uint16) {
	copy(c[offSrcIP:], src[:])
	copy(c[offDstIP:], dst[:])
	c[offTTL] = generatedTTL
	binary.BigEndian.PutUint16(c[offSrcPort:], sport)
	binary.BigEndian.PutUint16(c[offDstPort:], dport)
	words := [3][2]uint16{
		{binary.BigEndian.Uint16(a.dst[:]), binary.BigEndian.Uint16(dst[:])},
		{binary.BigEndian.Uint16(a.dst[2:]), binary.BigEndian.Uint16(dst[2:])},
		{a.dport, dport},
	}
	binary.BigEndian.PutUint16(c[offIPCsum:], patchSum(a.ipSum, words[:2]))
	u := patchSum(a.udpSum, words[:]) // the pseudo-header holds the address
	if u == 0 {
		u = 0xffff // a UDP checksum that sums to zero is sent as all ones
	}
	binary.BigEndian.PutUint16(c[offUDPCsum:], u)
}

// patchSum returns Internet checksum sum updated for 16-bit words changed
// from w[i][0] to w[i][1]: ~(~sum + Σ ~old + new), RFC 1624 eqn. 3.
func patchSum(sum uint16, w [][2]uint16) uint16 {
	s := uint32(^sum)
	for _, c := range w {
		s += uint32(^c[0]) + uint32(c[1])
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// Self returns the switch's address.
func (p *Pipeline) Self() netip.Addr { return netip.AddrFrom4(p.self) }

// SimPipeline returns a sim.Options.Pipeline function that runs the INA
// pipeline with k values per packet on every switch, sized by the switch's
// aggregators in the topology. Get a switch's pipeline back with
// net.Switch(name).Pipeline.(*ina.Pipeline).
func SimPipeline(k int) func(sw *topologies.Node, routes topologies.RouteTable) (emulator.Pipeline, error) {
	return func(sw *topologies.Node, routes topologies.RouteTable) (emulator.Pipeline, error) {
		return New(Config{K: k, Aggregators: sw.Aggregators}, fwd.New(sw, routes))
	}
}

// noteProgress records a contribution of round r from the workers of
// bitmap in job j's progress: the highest round seen and the workers seen
// in it, reset when a binding of another epoch (a new incarnation of the
// job id) first shows up. Each bit that changes is counted in the job's
// CounterProgress cell, so that controllers can read the registers
// without reading registers (ina.p4 does the same).
func (p *Pipeline) noteProgress(j int, epoch, r, bitmap uint32) {
	nr, nw := p.jobRound[j], p.jobWorkers[j]
	if p.jobEpoch[j] != epoch {
		nr, nw = 0, 0
	}
	if d := int32(r - nr); d > 0 {
		nr, nw = r, bitmap
	} else if d == 0 {
		nw |= bitmap
	}
	p.setProgress(j, nr, nw, epoch)
}

// setProgress sets job j's progress registers, counting each bit that
// flips in its CounterProgress cell.
func (p *Pipeline) setProgress(j int, round, workers, epoch uint32) {
	cells := p.progress[j*ProgressCells : (j+1)*ProgressCells]
	for k, flips := range [3]uint32{p.jobRound[j] ^ round, p.jobWorkers[j] ^ workers, p.jobEpoch[j] ^ epoch} {
		for ; flips != 0; flips &= flips - 1 {
			cells[32*k+bits.TrailingZeros32(flips)].pk++
		}
	}
	p.jobRound[j], p.jobWorkers[j], p.jobEpoch[j] = round, workers, epoch
}

// setCount sets cell c's contribution count, counting in its CounterHeld
// cell each change between free (0) and held (ina.p4 does the same).
func (p *Pipeline) setCount(c int, n uint8) {
	if (p.count[c] == 0) != (n == 0) {
		p.held[c].pk++
	}
	p.count[c] = n
}
