package ina

import (
	"fmt"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/tracebed/tracebed/emulator/p4rt"
)

// Names of the P4 objects, as p4c names them in ina.p4's P4Info. Controllers
// look ids up by these names (p4rt.Names), never by number: the Go twin's
// ids differ from the ones p4c assigns.
const (
	// TableJobs maps (job, round) to the job's binding. The round is a
	// range match, so a binding covers a range of rounds: this is how a job
	// is rebound between iterations (docs/ina-dataplane.md).
	TableJobs   = "InaIngress.jobs"
	FieldJob    = "job"   // exact, 16 bits
	FieldRound  = "round" // range, 32 bits
	ActionBind  = "InaIngress.set_job"
	ActionNoJob = "InaIngress.no_job" // default: drop, counted as no_job

	// Parameters of ActionBind.
	ParamMode    = "mode"    // 8 bits: ModePool or ModeShared
	ParamGen     = "gen"     // 32 bits: binding generation, unique per switch, nonzero
	ParamBase    = "base"    // 32 bits: first aggregator of the pool
	ParamSize    = "size"    // 32 bits: aggregators in the pool
	ParamWorkers = "workers" // 8 bits: workers of the job
	ParamGroup   = "group"   // 16 bits: multicast group of the job's workers
	ParamPSAddr  = "ps_addr" // 32 bits: parameter server IPv4 address (0: none)
	ParamPSPort  = "ps_port" // 16 bits: parameter server UDP port
	ParamMembers = "members" // 32 bits: workers whose contributions this switch completes (0: all)
	ParamUpAddr  = "up_addr" // 32 bits: the next switch up the job's tree (0: none, this is the top)
	ParamHold    = "hold"    // 8 bits: when a shared-mode aggregator is released (HoldCompletion, HoldReturn)
	ParamPlace   = "place"   // 8 bits: how a shared-mode chunk finds its aggregator (PlaceHash, PlaceSlot)
	ParamEpoch   = "epoch"   // 32 bits: the job's incarnation on the switch (Binding.Epoch)

	// TableRoutes forwards IPv4 traffic (bmv2; the Go twin takes its routes
	// from the topology and also accepts /32 entries here).
	TableRoutes   = "InaIngress.routes"
	FieldDst      = "dst" // lpm, 32 bits
	ActionForward = "InaIngress.forward"
	ActionDrop    = "InaIngress.drop"
	ParamPort     = "port" // 9 bits: egress port (also used by ActionReplica as the UDP port, 16 bits)
	ParamDstMAC   = "dmac" // 48 bits
	ParamSrcMAC   = "smac" // 48 bits

	// TableLocal holds the switch's own addresses (key FieldDst, exact):
	// INA packets addressed to one of them are the switch's to aggregate;
	// others are forwarded. The Go twin knows its address from the topology
	// and accepts (and reads back) entries here; bmv2 needs them.
	TableLocal     = "InaIngress.local"
	ActionSetLocal = "InaIngress.set_local"
	ActionNotLocal = "InaIngress.not_local"

	// TableReplicas rewrites each multicast copy of a result for the worker
	// it goes to: key (group, rid = replica instance).
	TableReplicas     = "InaEgress.replicas"
	FieldGroup        = "group" // exact, 16 bits
	FieldRID          = "rid"   // exact, 16 bits
	ActionReplica     = "InaEgress.set_replica"
	ActionDropReplica = "InaEgress.drop_replica"
	ParamAddr         = "addr" // 32 bits: the worker's IPv4 address
	// ActionReplica's UDP port parameter is ParamPort (16 bits).

	// Aggregator registers, 2 × aggregators cells: cell 2·a+v is copy v of
	// aggregator a.
	RegBitmap   = "InaIngress.agg_bitmap"   // 32 bits: contributors so far
	RegCount    = "InaIngress.agg_count"    // 8 bits: contributions so far (0: free/idle)
	RegGen      = "InaIngress.agg_gen"      // 32 bits: generation of the binding that wrote the cell
	RegRound    = "InaIngress.agg_round"    // 32 bits: round of the chunk held
	RegOffset   = "InaIngress.agg_offset"   // 32 bits: offset of the chunk held
	RegOverflow = "InaIngress.agg_overflow" // 8 bits: 1 when the sum overflowed
	// RegValuePrefix + i is value i of the aggregator (bit<32>, two's
	// complement), for i in 0..k-1.
	RegValuePrefix = "InaIngress.agg_value_"
	// Per-job registers, MaxJobs cells indexed by job id: the data plane's
	// own record of the job's progress, reset by the first packet of a new
	// epoch. Controllers read it from CounterProgress.
	RegJobRound   = "InaIngress.job_round"   // 32 bits: highest round seen from the job
	RegJobWorkers = "InaIngress.job_workers" // 32 bits: workers seen in that round
	RegJobEpoch   = "InaIngress.job_epoch"   // 32 bits: the epoch of the binding that last wrote them

	// Per-job counters, MaxJobs cells indexed by job id.
	CounterPackets    = "InaIngress.job_packets"    // packets and bytes: INA packets of the job
	CounterAggregated = "InaIngress.job_aggregated" // packets and bytes (value bytes): contributions added in the switch
	CounterResults    = "InaIngress.job_results"    // packets and bytes: results sent (a multicast counts once)
	CounterCollisions = "InaIngress.job_collisions" // packets: forwarded to the parameter server
	CounterOverflows  = "InaIngress.job_overflows"  // packets: aggregates that overflowed
	CounterUpward     = "InaIngress.job_upward"     // packets and bytes: partial aggregates sent up the job's tree
	// CounterJobDrops has MaxJobs × NumJobDrops cells: job·NumJobDrops + reason.
	CounterJobDrops = "InaIngress.job_drops"
	// CounterDrops has NumDrops cells: frames dropped that no job can be
	// charged with.
	CounterDrops = "InaIngress.drops"
	// CounterForwarded (one cell) counts transit frames forwarded.
	//
	// Every frame the switch receives on a port is counted in exactly one
	// of CounterForwarded, CounterDrops (by reason) and CounterPackets (by
	// job); the other per-job counters break CounterPackets down.
	CounterForwarded = "InaIngress.forwarded"
	// CounterProgress (packets, MaxJobs × ProgressCells cells) mirrors
	// RegJobRound, RegJobWorkers and RegJobEpoch for controllers: cell
	// job·ProgressCells + 32·r + i counts the flips of bit i of register r
	// (0 round, 1 workers, 2 epoch), so its parity is the bit. P4Runtime
	// servers that read no registers (bmv2's PI) read counters.
	CounterProgress = "InaIngress.job_progress"
)

// CounterHeld (packets, one cell per aggregator cell) counts the changes
// of each cell's agg_count between zero (free) and nonzero (holding a
// partial aggregate), so its parity says whether the cell is held: what a
// controller samples for shared-mode memory occupancy where registers
// cannot be read (bmv2's PI).
const CounterHeld = "InaIngress.agg_held"

// ProgressCells is the number of CounterProgress cells of a job.
const ProgressCells = 96

// When a shared-mode aggregator is released (ParamHold).
const (
	// HoldCompletion frees it when its chunk completes (or is flushed).
	HoldCompletion = 0
	// HoldReturn keeps it until the chunk's result comes back through the
	// switch from the parameter server (or from the switch above), the
	// rule of the ATP paper (docs/ina-dataplane.md, "Release on return").
	HoldReturn = 1
)

// Modes of a binding (ParamMode).
const (
	ModePool   = 0 // SwitchML: slot s uses aggregator base+s, two copies, result multicast
	ModeShared = 1 // ATP: hash placement, collisions and flushes to the parameter server
)

// How a shared-mode chunk finds its aggregator (ParamPlace).
const (
	// PlaceHash hashes the chunk: CRC-32 of (job, offset) over the pool.
	PlaceHash = 0
	// PlaceSlot takes the aggregator the packet names: its slot field,
	// modulo the pool (so a job reaches at most 65536 of it). Workers start window slot i at FirstSlot(job)+i
	// and move a slot to the aggregator a result names: the parameter
	// server picks a free one for a chunk that collided (ATP's remapping;
	// docs/ina-dataplane.md, "Slot remapping").
	PlaceSlot = 1
)

// FirstSlot is the aggregator index of window slot 0 of a job under
// PlaceSlot (slot i starts at FirstSlot+i, modulo 2^16 and the pool): a
// hash of the job, so jobs sharing a pool start on different blocks, as
// ATP's workers start at a hashed position.
func FirstSlot(job uint16) uint16 { return uint16(SharedIndex(job, 0, 1<<16)) }

// Drop reasons of CounterJobDrops.
const (
	DropDuplicate    = iota // a contribution already counted (bit set, chunk unfinished)
	DropStale               // a packet of an older chunk than the slot holds
	DropBadSlot             // slot outside the pool
	DropInconsistent        // worker count differs from the binding, or k differs from the switch's
	DropNotFromPS           // a result that comes neither from the job's parameter server nor from the switch above
	DropNoPS                // a packet for the parameter server of a job that has none
	DropNoRoute             // a packet the switch generated found no route
	NumJobDrops      = 8
)

// Drop reasons of CounterDrops.
const (
	DropMalformed      = iota // addressed to the switch on the INA port, but not a well-formed INA packet of its k
	DropNoJob                 // no binding for the packet's job and round
	DropNotIPv4               // not a well-formed IPv4 frame
	DropTransitNoRoute        // a transit frame without a route
	DropTTL                   // a transit frame whose TTL expired
	DropNotINA                // addressed to the switch, not an INA packet
	DropChecksum              // an INA packet whose UDP checksum is absent (0) or wrong
	NumDrops           = 8
)

// JobDropNames and DropNames name the drop reasons.
var (
	JobDropNames = [NumJobDrops]string{"duplicate", "stale", "bad_slot", "inconsistent", "not_from_ps", "no_ps", "no_route", ""}
	DropNames    = [NumDrops]string{"malformed", "no_job", "not_ipv4", "no_route", "ttl", "not_ina", "checksum", ""}
)

// Config sizes a pipeline.
type Config struct {
	// K is the number of int32 values per packet; 0 means DefaultK.
	K int
	// Aggregators is the number of aggregators (each with two copies).
	Aggregators int
	// Port is the INA UDP port; 0 means Port.
	Port uint16
}

func (c Config) withDefaults() (Config, error) {
	if c.K == 0 {
		c.K = DefaultK
	}
	if c.Port == 0 {
		c.Port = Port
	}
	if c.K < 1 || c.K > MaxK {
		return c, fmt.Errorf("ina: k = %d values per packet; want 1 to %d", c.K, MaxK)
	}
	if c.Aggregators < 0 || c.Aggregators > 1<<20 {
		return c, fmt.Errorf("ina: %d aggregators; want 0 to %d", c.Aggregators, 1<<20)
	}
	return c, nil
}

// P4Info returns the P4Info of a pipeline with configuration c: the same
// objects, names, kinds, widths, sizes and ids as the P4Info p4c generates
// from ina.p4 (for c.K = 64 and the program's AGGREGATORS:
// testdata/p4info.txtpb, p4c's output).
func P4Info(c Config) (*p4configv1.P4Info, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	info := &p4configv1.P4Info{PkgInfo: &p4configv1.PkgInfo{Name: "ina", Arch: "v1model", Version: "1"}}
	b := p4rt.NewInfoBuilder(info, 1)
	ps := func(name string, width int32) p4rt.ParamSpec { return p4rt.ParamSpec{Name: name, Width: width} }
	bind := b.Action(ActionBind, ps(ParamMode, 8), ps(ParamGen, 32), ps(ParamBase, 32), ps(ParamSize, 32),
		ps(ParamWorkers, 8), ps(ParamGroup, 16), ps(ParamPSAddr, 32), ps(ParamPSPort, 16),
		ps(ParamMembers, 32), ps(ParamUpAddr, 32), ps(ParamHold, 8), ps(ParamPlace, 8), ps(ParamEpoch, 32))
	noJob := b.Action(ActionNoJob)
	fwd := b.Action(ActionForward, ps(ParamPort, 9), ps(ParamDstMAC, 48), ps(ParamSrcMAC, 48))
	drop := b.Action(ActionDrop)
	rep := b.Action(ActionReplica, ps(ParamAddr, 32), ps(ParamPort, 16), ps(ParamDstMAC, 48), ps(ParamSrcMAC, 48))
	dropRep := b.Action(ActionDropReplica)
	setLocal := b.Action(ActionSetLocal)
	notLocal := b.Action(ActionNotLocal)
	exact := p4configv1.MatchField_EXACT
	b.Table(TableJobs, 4096, []p4rt.FieldSpec{{Name: FieldJob, Width: 16, Kind: exact}, {Name: FieldRound, Width: 32, Kind: p4configv1.MatchField_RANGE}}, noJob, bind, noJob)
	b.Table(TableRoutes, 1024, []p4rt.FieldSpec{{Name: FieldDst, Width: 32, Kind: p4configv1.MatchField_LPM}}, drop, fwd, drop)
	b.Table(TableLocal, 16, []p4rt.FieldSpec{{Name: FieldDst, Width: 32, Kind: exact}}, notLocal, setLocal, notLocal)
	b.Table(TableReplicas, 4096, []p4rt.FieldSpec{{Name: FieldGroup, Width: 16, Kind: exact}, {Name: FieldRID, Width: 16, Kind: exact}}, dropRep, rep, dropRep)
	cells := int32(2 * c.Aggregators)
	b.Register(RegBitmap, 32, cells)
	b.Register(RegCount, 8, cells)
	b.Register(RegGen, 32, cells)
	b.Register(RegRound, 32, cells)
	b.Register(RegOffset, 32, cells)
	b.Register(RegOverflow, 8, cells)
	for i := range c.K {
		b.Register(fmt.Sprintf("%s%d", RegValuePrefix, i), 32, cells)
	}
	b.Register(RegJobRound, 32, MaxJobs)
	b.Register(RegJobWorkers, 32, MaxJobs)
	b.Register(RegJobEpoch, 32, MaxJobs)
	both, pkts := p4configv1.CounterSpec_BOTH, p4configv1.CounterSpec_PACKETS
	b.Counter(CounterPackets, both, MaxJobs)
	b.Counter(CounterAggregated, both, MaxJobs)
	b.Counter(CounterResults, both, MaxJobs)
	b.Counter(CounterCollisions, pkts, MaxJobs)
	b.Counter(CounterOverflows, pkts, MaxJobs)
	b.Counter(CounterUpward, both, MaxJobs)
	b.Counter(CounterJobDrops, pkts, MaxJobs*NumJobDrops)
	b.Counter(CounterDrops, pkts, NumDrops)
	b.Counter(CounterForwarded, pkts, 1)
	b.Counter(CounterProgress, pkts, MaxJobs*ProgressCells)
	b.Counter(CounterHeld, pkts, int64(cells))
	p4rt.AssignP4cIDs(info)
	return info, nil
}
