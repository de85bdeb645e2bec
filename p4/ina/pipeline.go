package ina

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
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
// everything else with the wrapped forwarding pipeline. It implements
// emulator.Pipeline and p4rt.Device; like every pipeline it is not safe for
// concurrent use (the substrate serializes packets and control calls).
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

	jobRound, jobWorkers [MaxJobs]uint32

	jobs     [MaxJobs][]*jobEntry // by job id, highest priority first
	rt       *p4rt.Target         // the P4Runtime view (device.go)
	groups   map[uint16]*group
	replicas map[uint32]*replica // group<<16 | rid

	packets, aggregated, results [MaxJobs]counterCell
	collisions, overflows        [MaxJobs]counterCell
	jobDrops                     [MaxJobs * NumJobDrops]counterCell
	drops                        [NumDrops]counterCell

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
	all     uint32
	group   uint16
	psIP    [4]byte
	psPort  uint16
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
// pipeline. It sets f.Local to claim INA frames addressed to the switch.
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
		count: make([]uint8, cells), ovf: make([]uint8, cells),
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
	f.Local = p.local
	return p, nil
}

// Config returns the pipeline's configuration.
func (p *Pipeline) Config() Config { return p.cfg }

// Forwarding returns the wrapped forwarding pipeline.
func (p *Pipeline) Forwarding() *fwd.Pipeline { return p.fwd }

// Process implements emulator.Pipeline.
func (p *Pipeline) Process(now time.Duration, in int, f []byte, out emulator.Emitter) {
	p.fwd.Process(now, in, f, out)
}

// local handles frames addressed to the switch.
func (p *Pipeline) local(now time.Duration, _ int, f []byte, out emulator.Emitter) {
	p.now = now
	if frame.Proto(f) != frame.ProtoUDP || len(f) < offValues || f[frame.EthLen] != 0x45 ||
		binary.BigEndian.Uint16(f[frame.EthLen+6:])&0x1fff != 0 || // a fragment
		binary.BigEndian.Uint16(f[offDstPort:]) != p.cfg.Port {
		p.fwd.Counters.Drops[fwd.DropLocal]++
		return
	}
	udpLen := int(binary.BigEndian.Uint16(f[frame.EthLen+frame.IPv4Len+4:]))
	ipLen := int(binary.BigEndian.Uint16(f[frame.EthLen+2:]))
	if udpLen != ipLen-frame.IPv4Len || udpLen < frame.UDPLen || frame.EthLen+ipLen > len(f) {
		p.drops[DropMalformed].pk++
		return
	}
	payload := f[offINA : frame.EthLen+ipLen]
	h, vals, err := Parse(payload)
	if err != nil {
		p.drops[DropMalformed].pk++
		return
	}
	f = f[:frame.EthLen+ipLen] // drop Ethernet padding, if any
	e := p.lookup(h.Job, h.Round)
	if e == nil {
		p.drops[DropNoJob].pk++
		return
	}
	j := int(h.Job)
	p.packets[j].pk++
	p.packets[j].by += uint64(len(f))
	if h.Workers != e.workers || int(h.K) != p.k {
		p.jobDrop(j, DropInconsistent)
		return
	}
	switch {
	case h.Flags&FlagData != 0:
		if d := int32(h.Round - p.jobRound[j]); d > 0 {
			p.jobRound[j], p.jobWorkers[j] = h.Round, h.Bitmap
		} else if d == 0 {
			p.jobWorkers[j] |= h.Bitmap
		}
		if e.mode == ModePool {
			p.poolData(e, &h, vals, f, out)
		} else {
			p.sharedData(e, &h, vals, f, out)
		}
	case h.Flags&FlagResult != 0:
		if [4]byte(f[offSrcIP:offSrcIP+4]) != e.psIP || binary.BigEndian.Uint16(f[offSrcPort:]) != e.psPort || e.psPort == 0 {
			p.jobDrop(j, DropNotFromPS)
			return
		}
		p.multicast(e, f, out)
	default: // a partial only ever goes to a parameter server
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

// poolData handles a data packet of a job in pool mode (SwitchML).
func (p *Pipeline) poolData(e *jobEntry, h *Header, vals, f []byte, out emulator.Emitter) {
	j := int(h.Job)
	if uint32(h.Slot) >= e.size {
		p.jobDrop(j, DropBadSlot)
		return
	}
	c := 2*int(e.base+uint32(h.Slot)) + int(h.Ver)
	if p.gen[c] != e.gen || chunkCmp(h.Round, h.Offset, p.round[c], p.offset[c]) > 0 {
		p.start(c, e.gen, h, vals)
	} else if chunkCmp(h.Round, h.Offset, p.round[c], p.offset[c]) < 0 {
		p.jobDrop(j, DropStale)
		return
	} else if p.bitmap[c]&h.Bitmap != 0 {
		if p.count[c] == e.workers {
			// A retransmission (or copy) of a finished chunk: answer the
			// sender alone from this copy.
			p.fillResult(c, e, f)
			p.swapToSender(f)
			p.results[j].pk++
			p.results[j].by += uint64(len(f))
			p.route(f, out)
			return
		}
		p.jobDrop(j, DropDuplicate)
		return
	} else {
		p.add(c, h, vals)
	}
	if p.count[c] == e.workers {
		p.complete(c, e)
		p.fillResult(c, e, f)
		p.multicast(e, f, out)
	}
}

// sharedData handles a data packet of a job in shared mode (ATP).
func (p *Pipeline) sharedData(e *jobEntry, h *Header, vals, f []byte, out emulator.Emitter) {
	j := int(h.Job)
	c := 2 * int(e.base+SharedIndex(h.Job, h.Offset, e.size))
	retx := h.Flags&FlagRetransmit != 0
	switch {
	case p.count[c] == 0 || (p.gen[c] == e.gen && int32(h.Round-p.round[c]) > 0):
		// Free, or held by a stale partial of an older round of this binding.
		if retx {
			p.closeHold(c)
			p.count[c] = 0
			p.toPS(e, f, FlagCollision, out)
			return
		}
		p.start(c, e.gen, h, vals)
	case p.gen[c] == e.gen && p.round[c] == h.Round && p.offset[c] == h.Offset:
		if p.bitmap[c]&h.Bitmap == 0 {
			p.add(c, h, vals)
		} else if !retx {
			p.jobDrop(j, DropDuplicate)
			return
		}
		if p.count[c] < e.workers && retx {
			// Flush the partial aggregate to the parameter server.
			p.fill(c, f)
			f[offINA+1] = FlagPartial | FlagRetransmit | p.ovfFlag(c)
			binary.BigEndian.PutUint32(f[offINA+20:], p.bitmap[c])
			p.closeHold(c)
			p.count[c] = 0
			p.toPS(e, f, 0, out)
			return
		}
	default:
		p.toPS(e, f, FlagCollision, out)
		return
	}
	if p.count[c] == e.workers {
		p.complete(c, e)
		p.fillResult(c, e, f)
		p.count[c] = 0 // freed when its result is sent
		p.toPS(e, f, 0, out)
	}
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
	p.bitmap[c], p.count[c], p.ovf[c] = h.Bitmap, 1, 0
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
	if ovf < 0 {
		p.ovf[c] = 1
	}
	p.bitmap[c] |= h.Bitmap
	p.count[c]++
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

// setIP rewrites the addressing of an INA frame and its IPv4 checksum.
func setIP(f []byte, src, dst [4]byte, sport, dport uint16) {
	copy(f[offSrcIP:], src[:])
	copy(f[offDstIP:], dst[:])
	f[offTTL] = generatedTTL
	binary.BigEndian.PutUint16(f[offSrcPort:], sport)
	binary.BigEndian.PutUint16(f[offDstPort:], dport)
	binary.BigEndian.PutUint16(f[offUDPCsum:], 0)
	binary.BigEndian.PutUint16(f[offIPCsum:], 0)
	binary.BigEndian.PutUint16(f[offIPCsum:], frame.Checksum(f[frame.EthLen:frame.EthLen+frame.IPv4Len]))
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
	p.route(f, out)
}

// route sends a frame the switch generated towards its destination.
func (p *Pipeline) route(f []byte, out emulator.Emitter) {
	p.fwd.Forward(f, out)
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
	// The copies share one allocation; each is a separate, capacity-limited
	// slice, so the receivers own disjoint frames.
	l := len(f)
	slab := make([]byte, last*l)
	for i, gr := range g.reps {
		r := p.replicas[uint32(e.group)<<16|gr.instance]
		if r == nil {
			p.NoReplica++
			continue
		}
		c := f
		if i != last {
			c = slab[i*l : (i+1)*l : (i+1)*l]
			copy(c, f)
		}
		setIP(c, p.self, r.ip, p.cfg.Port, r.port)
		frame.SetMACs(c, r.smac, r.dmac)
		out.Emit(int(gr.port), prio, c)
	}
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
