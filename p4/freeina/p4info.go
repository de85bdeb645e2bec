package freeina

import (
	"fmt"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/roce/wire"
	"github.com/tracebed/tracebed/p4/fwd"
)

// ProgramName is the program's name: its P4Info's pkg_info.name, and its
// name in the registry of data planes that switches and testbeds load.
const ProgramName = "freeina"

// Names of freeina.p4's own objects, as in its P4Info (the forwarding
// objects are fwd.p4's: ingress.ipv4_route and ingress.route_miss).
// Controllers look ids up by these names (p4rt.Names), never by number.
const (
	// TableConns recognises the RC connections of FreeINA's INA path:
	// key (source address, destination address, destination QP) →
	// (job, worker, PSN of chunk 0 of the current all-reduce). A RoCEv2 packet that misses it is forwarded as any
	// other frame: the parameter-server path, acknowledgements, the
	// connection manager, other tenants.
	TableConns   = "ingress.freeina_conns"
	FieldSrc     = "src" // exact, 32 bits
	FieldDst     = "dst" // exact, 32 bits
	FieldQPN     = "qpn" // exact, 24 bits
	ActionConn   = "ingress.set_conn"
	ActionNotINA = "ingress.not_ina" // default: forward
	ParamJob     = "job"             // 16 bits
	ParamWorker  = "worker"          // 8 bits: the sender's rank, 0 to workers−1
	// ParamPSN is the PSN of chunk 0 of the connection's current
	// all-reduce (24 bits), a parameter of ActionConn and ActionReplica
	// that Controller.Bind writes with each binding: ingress numbers a
	// packet's chunk by it, egress a replica's PSN. A table parameter, not
	// a register: bmv2's P4Runtime server (PI) writes no register.
	ParamPSN = "psn"

	// TableJobs holds each job's binding for its current all-reduce (the
	// all-reduce-level allocation: written when the hosts are granted
	// memory, deleted when the all-reduce ends).
	TableJobs     = "ingress.freeina_jobs"
	FieldJob      = "job" // exact, 16 bits
	ActionBind    = "ingress.set_binding"
	ActionNoBind  = "ingress.no_binding" // default: drop, counted no_binding
	ParamGen      = "gen"                // 32 bits: binding generation, nonzero, unique on the switch
	ParamBase     = "base"               // 32 bits: first slot of the range
	ParamSize     = "size"               // 32 bits: slots (the hosts' window)
	ParamChunks   = "chunks"             // 32 bits: chunks of the all-reduce (one packet each)
	ParamWorkers  = "workers"            // 8 bits
	ParamGroup    = "group"              // 16 bits: multicast group of the job's connections
	TableReplicas = "egress.freeina_replicas"
	FieldGroup    = "group" // exact, 16 bits
	FieldRID      = "rid"   // exact, 16 bits: replica instance = worker + 1
	ActionReplica = "egress.set_replica"
	ActionNoRep   = "egress.drop_replica"
	ParamRSrc     = "src"   // 32: the connection's sender
	ParamRDst     = "dst"   // 32: its receiver (the sender's successor)
	ParamRSport   = "sport" // 16: the sender's UDP source port
	ParamRQPN     = "qpn"   // 24: the receiver's QP
	ParamRKey     = "rkey"  // 32: the receiver's result region
	ParamVA       = "va"    // 64: address of chunk 0 in that region
	ParamDstMAC   = "dmac"  // 48
	ParamSrcMAC   = "smac"  // 48
	// ActionReplica's PSN of chunk 0 is ParamPSN (24 bits); the copy for
	// worker i's connection is instance (rid) i+1.

	// Slot registers, 2 × slots cells (cell 2·base + chunk mod 2·size).
	RegBitmap   = "ingress.agg_bitmap"   // 32: contributors so far
	RegCount    = "ingress.agg_count"    // 8: contributions so far
	RegGen      = "ingress.agg_gen"      // 32: generation of the binding that wrote the cell
	RegChunk    = "ingress.agg_chunk"    // 32: chunk held
	RegOverflow = "ingress.agg_overflow" // 8: 1 when the int32 sum overflowed
	// RegValuePrefix + i is value i of a cell, for i in 0..k−1.
	RegValuePrefix = "ingress.agg_value_"

	// Per-job counters, MaxJobs cells.
	CounterPackets    = "ingress.freeina_packets"    // packets and bytes of the job's INA connections
	CounterAggregated = "ingress.freeina_aggregated" // contributions added (bytes: value bytes)
	CounterHeld       = "ingress.freeina_held"       // contributions kept until their chunk completes
	CounterResults    = "ingress.freeina_results"    // chunks completed (multicast once each)
	CounterAnswers    = "ingress.freeina_answers"    // retransmissions answered with the aggregate
	CounterOverflows  = "ingress.freeina_overflows"  // chunks whose sum overflowed
	// CounterJobDrops has MaxJobs × NumJobDrops cells: job·NumJobDrops + reason.
	CounterJobDrops = "ingress.freeina_job_drops"
)

// Drop reasons of CounterJobDrops.
const (
	DropDuplicate    = iota // a contribution already counted, its chunk not complete
	DropStale               // a chunk older than the one its cell holds
	DropRange               // a PSN outside the all-reduce's chunks (another round)
	DropMalformed           // not a WRITE_ONLY with immediate of k values
	DropICRC                // the ICRC does not match the packet
	DropNoBinding           // the job holds no memory now
	DropInconsistent        // the connection's worker is not below the binding's workers
	DropTTL                 // a completed chunk's result whose TTL ran out
	NumJobDrops      = 8
)

// JobDropNames names the drop reasons.
var JobDropNames = [NumJobDrops]string{"duplicate", "stale", "range", "malformed", "icrc", "no_binding", "inconsistent", "ttl"}

// Limits of the data plane.
const (
	DefaultK   = 256 // values per packet: 1 KiB, a RoCE path MTU of 1024
	MaxK       = 1024
	MaxJobs    = 1024
	MaxWorkers = 32
	// MaxChunks bounds an all-reduce: chunks are told apart by PSN, a
	// 24-bit sequence number.
	MaxChunks = 1 << 23
	// HeaderLen is the RoCE headers of an INA packet before its values:
	// BTH, RETH, ImmDt.
	HeaderLen = wire.BTHLen + wire.RETHLen + wire.ImmLen
	// OverflowFlag is set in the ImmDt of a result whose int32 sum
	// overflowed (hosts keep the immediate's top bit clear).
	OverflowFlag = 1 << 31
)

// FrameLen is the length of an INA frame carrying k values: Ethernet,
// IPv4, UDP, BTH, RETH, ImmDt, the values and the ICRC.
func FrameLen(k int) int { return 42 + HeaderLen + 4*k + wire.ICRCLen }

// AckLen is the length of an RC acknowledgement frame.
const AckLen = 42 + wire.BTHLen + wire.AETHLen + wire.ICRCLen

// Config sizes a pipeline.
type Config struct {
	// K is the int32 values per packet (and per cell); 0 means DefaultK.
	K int
	// Slots is the number of slots, each of two cells of K values.
	Slots int
}

// SlotsFor is the slots of K values that the SRAM of aggregators of
// 64 values holds (the topology's unit: SwitchML's 256-byte aggregator).
func SlotsFor(aggregators, k int) int {
	if k <= 0 {
		k = DefaultK
	}
	return aggregators * 64 / k
}

func (c Config) withDefaults() (Config, error) {
	if c.K == 0 {
		c.K = DefaultK
	}
	switch {
	case c.K < 1 || c.K > MaxK:
		return c, fmt.Errorf("freeina: k = %d values per packet; want 1 to %d", c.K, MaxK)
	case c.Slots < 0 || c.Slots > 1<<20:
		return c, fmt.Errorf("freeina: %d slots; want 0 to %d", c.Slots, 1<<20)
	}
	return c, nil
}

// P4Info returns the P4Info of a pipeline with configuration c: fwd.p4's
// forwarding objects, then FreeINA's with the names, kinds, widths and
// sizes p4c gives freeina.p4, in the Go twin's own numbering.
func P4Info(c Config) (*p4configv1.P4Info, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	info := fwd.P4Info()
	info.PkgInfo.Name = ProgramName
	info.PkgInfo.Doc = &p4configv1.Documentation{Brief: "FreeINA: in-network aggregation of RoCEv2 RC connections between hosts (docs/freeina.md), over fwd.p4's forwarding"}
	b := p4rt.NewInfoBuilder(info, 0x101)
	exact := p4configv1.MatchField_EXACT
	conn := b.Action(ActionConn, p4rt.ParamSpec{Name: ParamJob, Width: 16}, p4rt.ParamSpec{Name: ParamWorker, Width: 8},
		p4rt.ParamSpec{Name: ParamPSN, Width: 24})
	notINA := b.Action(ActionNotINA)
	bind := b.Action(ActionBind, p4rt.ParamSpec{Name: ParamGen, Width: 32}, p4rt.ParamSpec{Name: ParamBase, Width: 32},
		p4rt.ParamSpec{Name: ParamSize, Width: 32}, p4rt.ParamSpec{Name: ParamChunks, Width: 32},
		p4rt.ParamSpec{Name: ParamWorkers, Width: 8}, p4rt.ParamSpec{Name: ParamGroup, Width: 16})
	noBind := b.Action(ActionNoBind)
	rep := b.Action(ActionReplica, p4rt.ParamSpec{Name: ParamRSrc, Width: 32}, p4rt.ParamSpec{Name: ParamRDst, Width: 32},
		p4rt.ParamSpec{Name: ParamRSport, Width: 16}, p4rt.ParamSpec{Name: ParamRQPN, Width: 24},
		p4rt.ParamSpec{Name: ParamRKey, Width: 32}, p4rt.ParamSpec{Name: ParamVA, Width: 64},
		p4rt.ParamSpec{Name: ParamDstMAC, Width: 48}, p4rt.ParamSpec{Name: ParamSrcMAC, Width: 48},
		p4rt.ParamSpec{Name: ParamPSN, Width: 24})
	noRep := b.Action(ActionNoRep)
	b.Table(TableConns, 4096, []p4rt.FieldSpec{{Name: FieldSrc, Width: 32, Kind: exact}, {Name: FieldDst, Width: 32, Kind: exact},
		{Name: FieldQPN, Width: 24, Kind: exact}}, notINA, conn, notINA)
	b.Table(TableJobs, MaxJobs, []p4rt.FieldSpec{{Name: FieldJob, Width: 16, Kind: exact}}, noBind, bind, noBind)
	b.Table(TableReplicas, 4096, []p4rt.FieldSpec{{Name: FieldGroup, Width: 16, Kind: exact}, {Name: FieldRID, Width: 16, Kind: exact}},
		noRep, rep, noRep)
	cells := int32(2 * c.Slots)
	b.Register(RegBitmap, 32, cells)
	b.Register(RegCount, 8, cells)
	b.Register(RegGen, 32, cells)
	b.Register(RegChunk, 32, cells)
	b.Register(RegOverflow, 8, cells)
	for i := range c.K {
		b.Register(fmt.Sprintf("%s%d", RegValuePrefix, i), 32, cells)
	}
	both, pkts := p4configv1.CounterSpec_BOTH, p4configv1.CounterSpec_PACKETS
	b.Counter(CounterPackets, both, MaxJobs)
	b.Counter(CounterAggregated, both, MaxJobs)
	b.Counter(CounterHeld, pkts, MaxJobs)
	b.Counter(CounterResults, both, MaxJobs)
	b.Counter(CounterAnswers, both, MaxJobs)
	b.Counter(CounterOverflows, pkts, MaxJobs)
	b.Counter(CounterJobDrops, pkts, MaxJobs*NumJobDrops)
	p4rt.AssignP4cIDs(info)
	return info, nil
}
