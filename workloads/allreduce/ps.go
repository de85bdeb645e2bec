package allreduce

import (
	"fmt"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/p4/ina"
)

// PSJob describes one job a parameter server aggregates for.
type PSJob struct {
	Job uint16
	// Workers are the workers' addresses, indexed by worker id.
	Workers []emulator.Addr
	// Elements is the length of the job's tensor.
	Elements int
	// K is the number of values per packet; 0 means ina.DefaultK.
	K int
	// Multicast, when valid, is the aggregation switch (its IP, ina.Port):
	// complete results go there once, and the switch multicasts them to the
	// workers (ATP's shared mode). Otherwise the PS sends one copy to each
	// worker (jobs without switch memory).
	Multicast emulator.Addr
	// Republish, with Multicast, answers every retransmission of a chunk
	// the PS has completed by sending the result through the switch again
	// (instead of to the worker alone), and a result the switch resends
	// as well: with release on return (ina.HoldReturn) that is what frees
	// the aggregators the chunk still holds on the way back.
	Republish bool
	// Remap is ATP's slot remapping (shared mode with ina.PlaceSlot): a
	// chunk the PS completes in software — some of it collided — gets a
	// new aggregator for its window slot, one that no other slot of the
	// job uses (modulo Size), named in its result; the workers move the
	// slot there. Window is the job's window (the workers' slots).
	Remap        bool
	Window, Size int
}

// PSStats count a parameter server's work.
type PSStats struct {
	Packets    uint64 // INA packets received
	Merged     uint64 // data and partial packets added
	FromSwitch uint64 // complete results received from the switch
	Completed  uint64 // chunks the PS completed in software
	Overlaps   uint64 // partials overlapping what the PS has (dropped)
	Answers    uint64 // retransmissions answered with a stored result
	Ignored    uint64 // duplicates and packets of old rounds
	Malformed  uint64
	SentBytes  uint64
	// Collided counts data packets the switch forwarded to the PS because
	// their aggregator was busy (or because they were retransmissions, which
	// never claim a free aggregator): the workers' fallback traffic.
	Collided uint64
}

// PSJobStats count a parameter server's work for one job.
type PSJobStats struct {
	Packets    uint64 // INA packets of the job received
	Collided   uint64 // data packets forwarded by the switch (fallback)
	FromSwitch uint64 // complete results received from the switch
	Completed  uint64 // chunks completed in software
}

// PS is a parameter server: it aggregates in software the chunks a switch
// could not (collisions, flushed partials) and all chunks of jobs without
// switch memory, and keeps every result of the current and previous round to
// answer retransmissions. It is an emulator.Agent.
type PS struct {
	env   emulator.Env
	jobs  map[uint16]*psJob
	Stats PSStats
	buf   []byte
}

type psJob struct {
	PSJob
	stats     PSJobStats
	k, chunks int
	all       uint32
	rounds    [2]psRound // by round parity
	agg       []uint16   // Remap: the aggregator each window slot names, as the PS last saw it
	spare     [][]int32  // value buffers of kept partials, for reuse (keep, drop)
}

type psRound struct {
	valid  bool
	round  uint32
	values []int32 // chunk c: values[c*k : (c+1)*k]
	bitmap []uint32
	done   []bool
	ovf    []bool
	slot   []uint16 // the slot field of each completed chunk's results
	// parts holds, for each incomplete chunk of a job a switch feeds
	// (Multicast), the partials received (keep, cover).
	parts map[int][]psPart
}

// psPart is a partial aggregate of one chunk: the exact sum of the
// contributions its bitmap names.
type psPart struct {
	bitmap uint32
	ovf    bool
	values []int32
}

// maxParts bounds the partials the PS keeps of one chunk; more are
// summed if they can be, dropped and counted as overlaps if not.
// coverBudget bounds the steps of one search for a cover: a search that
// runs out fails, and the next partial of the chunk searches again.
const (
	maxParts    = 2 * ina.MaxWorkers
	coverBudget = 4096
)

// NewPS returns a parameter server for jobs.
func NewPS(jobs ...PSJob) (*PS, error) {
	p := &PS{jobs: map[uint16]*psJob{}}
	for _, j := range jobs {
		if err := p.Add(j); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Add registers a job with the PS.
func (p *PS) Add(j PSJob) error {
	if j.K == 0 {
		j.K = ina.DefaultK
	}
	switch {
	case p.jobs[j.Job] != nil:
		return fmt.Errorf("ps: job %d added twice", j.Job)
	case len(j.Workers) == 0 || len(j.Workers) > ina.MaxWorkers:
		return fmt.Errorf("ps: job %d has %d workers, want 1 to %d", j.Job, len(j.Workers), ina.MaxWorkers)
	case j.K < 1 || j.K > ina.MaxK:
		return fmt.Errorf("ps: job %d: k = %d", j.Job, j.K)
	case j.Elements < 0:
		return fmt.Errorf("ps: job %d: %d elements", j.Job, j.Elements)
	case j.Remap && (j.Window < 1 || j.Window > 1<<16 || j.Size < 1):
		return fmt.Errorf("ps: job %d: remapping needs the window (%d slots, at most %d) and the pool (%d)", j.Job, j.Window, 1<<16, j.Size)
	}
	pj := &psJob{PSJob: j, k: j.K, chunks: (j.Elements + j.K - 1) / j.K, all: ina.AllWorkers(len(j.Workers))}
	for i := range pj.rounds {
		r := &pj.rounds[i]
		r.values = make([]int32, pj.chunks*pj.k)
		r.bitmap = make([]uint32, pj.chunks)
		r.done = make([]bool, pj.chunks)
		r.ovf = make([]bool, pj.chunks)
		r.slot = make([]uint16, pj.chunks)
		r.parts = map[int][]psPart{}
	}
	if j.Remap {
		pj.agg = make([]uint16, j.Window)
		for i := range pj.agg {
			pj.agg[i] = ina.FirstSlot(j.Job) + uint16(i)
		}
	}
	p.jobs[j.Job] = pj
	return nil
}

// Remove forgets a job (it left, or its switch job id is given to another
// job) and returns its statistics. Packets of the job that still arrive are
// counted as malformed.
func (p *PS) Remove(job uint16) (PSJobStats, bool) {
	j := p.jobs[job]
	if j == nil {
		return PSJobStats{}, false
	}
	delete(p.jobs, job)
	return j.stats, true
}

// JobStats returns the statistics of a job the PS aggregates for.
func (p *PS) JobStats(job uint16) (PSJobStats, bool) {
	j := p.jobs[job]
	if j == nil {
		return PSJobStats{}, false
	}
	return j.stats, true
}

// Start implements emulator.Agent.
func (p *PS) Start(env emulator.Env) { p.env = env }

// round returns the buffer of round r, recycling the buffer of round r-2.
func (j *psJob) round(r uint32) *psRound {
	b := &j.rounds[r&1]
	if b.valid && b.round == r {
		return b
	}
	if b.valid && int32(r-b.round) < 0 {
		return nil // an old round
	}
	b.valid, b.round = true, r
	clear(b.bitmap)
	clear(b.done)
	clear(b.ovf)
	for c := range b.parts {
		b.drop(c, &j.spare)
	}
	return b
}

// Recv implements emulator.Agent.
func (p *PS) Recv(_ emulator.Addr, payload []byte) {
	h, vals, err := ina.Parse(payload)
	if err != nil {
		p.Stats.Malformed++
		return
	}
	j := p.jobs[h.Job]
	if j == nil || int(h.Workers) != len(j.Workers) || int(h.K) != j.k || h.Offset%uint32(j.k) != 0 || int(h.Offset)/j.k >= j.chunks {
		p.Stats.Malformed++
		return
	}
	p.Stats.Packets++
	j.stats.Packets++
	if h.Flags&(ina.FlagData|ina.FlagCollision) == ina.FlagData|ina.FlagCollision {
		p.Stats.Collided++
		j.stats.Collided++
	}
	r := j.round(h.Round)
	if r == nil {
		p.Stats.Ignored++
		return
	}
	c := int(h.Offset) / j.k
	acc := r.values[c*j.k : (c+1)*j.k]
	switch {
	case h.Flags&ina.FlagResult != 0:
		if r.done[c] {
			if j.Republish && h.Flags&ina.FlagRetransmit != 0 {
				// The switch holds the chunk and its result did not come
				// back: send it again.
				p.Stats.Answers++
				p.publish(j, r, c, h)
				return
			}
			p.Stats.Ignored++
			return
		}
		p.Stats.FromSwitch++
		j.stats.FromSwitch++
		r.drop(c, &j.spare)
		ina.GetValues(acc, vals)
		r.bitmap[c], r.done[c], r.ovf[c] = j.all, true, h.Flags&ina.FlagOverflow != 0
		r.slot[c] = j.place(c, h.Slot, false)
		p.publish(j, r, c, h)
		return
	case r.done[c]:
		if h.Flags&ina.FlagRetransmit != 0 {
			p.Stats.Answers++
			if j.Republish && j.Multicast.IsValid() {
				p.publish(j, r, c, h)
			} else {
				p.send(j, r, c, h, j.Workers[h.Worker])
			}
		} else {
			p.Stats.Ignored++
		}
		return
	}
	fed := j.Multicast.IsValid() // partials may overlap: keep them
	kept := fed && r.keep(c, j.k, h, vals, &j.spare)
	if r.bitmap[c]&h.Bitmap != 0 {
		if !kept || !r.cover(c, j.k, j.all) {
			p.Stats.Overlaps++
			return
		}
		p.complete(j, r, c, h)
		return
	}
	if r.bitmap[c] == 0 {
		ina.GetValues(acc, vals)
	} else {
		var ovf int32
		for i := range acc {
			a, b := acc[i], ina.Value(vals, i)
			s := a + b
			ovf |= (a ^ s) & (b ^ s)
			acc[i] = s
		}
		if ovf < 0 {
			r.ovf[c] = true
		}
	}
	if h.Flags&ina.FlagOverflow != 0 {
		r.ovf[c] = true
	}
	r.bitmap[c] |= h.Bitmap
	p.Stats.Merged++
	if r.bitmap[c] == j.all || kept && r.cover(c, j.k, j.all) {
		p.complete(j, r, c, h)
	}
}

// complete publishes chunk c, summed in software.
func (p *PS) complete(j *psJob, r *psRound, c int, h ina.Header) {
	r.drop(c, &j.spare)
	r.done[c] = true
	r.slot[c] = j.place(c, h.Slot, true)
	p.Stats.Completed++
	j.stats.Completed++
	p.publish(j, r, c, h)
}

// keep records the partial h of chunk c, unless the PS has one with the
// same bitmap (a retransmission: the same sum) or maxParts of them. It
// reports whether the partial was kept.
//
// With two levels of aggregation one contribution can reach the PS in
// two partials that overlap: a worker's first packet collides at the
// spine and reaches the PS alone or with another rack's, its
// retransmission is summed with a rack neighbour's at the leaf. A sum
// cannot be taken apart, and workers that retransmit together keep being
// summed together, so dropping the overlapping partial could wait for
// ever. The PS keeps the partials of a job a switch feeds instead, and
// completes the chunk from any of them that cover every worker once
// (cover). Workers that send to the PS directly send only their own
// contribution: an overlap is a duplicate, and nothing is kept.
func (r *psRound) keep(c, k int, h ina.Header, vals []byte, spare *[][]int32) bool {
	parts := r.parts[c]
	if len(parts) >= maxParts {
		return false
	}
	for _, q := range parts {
		if q.bitmap == h.Bitmap {
			return false
		}
	}
	var v []int32
	if n := len(*spare); n > 0 {
		v, *spare = (*spare)[n-1], (*spare)[:n-1]
	} else {
		v = make([]int32, k)
	}
	ina.GetValues(v, vals)
	r.parts[c] = append(parts, psPart{bitmap: h.Bitmap, ovf: h.Flags&ina.FlagOverflow != 0, values: v})
	return true
}

// drop forgets chunk c's partials, keeping their buffers in spare.
func (r *psRound) drop(c int, spare *[][]int32) {
	for _, q := range r.parts[c] {
		*spare = append(*spare, q.values)
	}
	delete(r.parts, c)
}

// cover looks among chunk c's partials for some whose bitmaps are disjoint
// and together name all workers; if it finds them, it sets the chunk's sum
// to theirs and reports true. Each partial is an exact sum of what its
// bitmap names, so the result is exact whichever cover is found.
func (r *psRound) cover(c, k int, all uint32) bool {
	parts := r.parts[c]
	var pick []int
	steps := 0
	var search func(have uint32) bool
	search = func(have uint32) bool {
		missing := all &^ have
		if missing == 0 {
			return true
		}
		low := missing & -missing
		for i, q := range parts {
			if q.bitmap&low == 0 || q.bitmap&have != 0 {
				continue
			}
			if steps++; steps > coverBudget {
				return false
			}
			pick = append(pick, i)
			if search(have | q.bitmap) {
				return true
			}
			pick = pick[:len(pick)-1]
		}
		return false
	}
	if !search(0) {
		return false
	}
	acc := r.values[c*k : (c+1)*k]
	ovf := false
	copy(acc, parts[pick[0]].values)
	for _, i := range pick {
		ovf = ovf || parts[i].ovf
	}
	var wrap int32
	for _, i := range pick[1:] {
		for e, b := range parts[i].values {
			a := acc[e]
			s := a + b
			wrap |= (a ^ s) & (b ^ s)
			acc[e] = s
		}
	}
	r.bitmap[c], r.ovf[c] = all, ovf || wrap < 0
	return true
}

// place returns the slot field of chunk c's results, whose packets named
// slot: the same, or with Remap, for a chunk completed in software (some
// of it collided), the first aggregator after it, modulo the pool, that
// no other window slot of the job names (ATP's remapping); the slot's
// next chunk goes there. The PS remembers every slot's aggregator from the
// results it sends.
func (j *psJob) place(c int, slot uint16, software bool) uint16 {
	if !j.Remap {
		return slot
	}
	i := c % len(j.agg)
	if software {
		size := uint32(min(j.Size, 1<<16)) // the slot field reaches 2^16 aggregators
		used := make(map[uint32]bool, len(j.agg))
		for s, a := range j.agg {
			if s != i {
				used[uint32(a)%size] = true
			}
		}
		for d := uint32(1); d < size; d++ {
			if b := (uint32(slot) + d) % size; !used[b] {
				slot = uint16(b)
				break
			}
		}
	}
	j.agg[i] = slot
	return slot
}

// publish sends a completed chunk to the workers.
func (p *PS) publish(j *psJob, r *psRound, c int, h ina.Header) {
	if j.Multicast.IsValid() {
		p.send(j, r, c, h, j.Multicast)
		return
	}
	for _, w := range j.Workers {
		p.send(j, r, c, h, w)
	}
}

func (p *PS) send(j *psJob, r *psRound, c int, h ina.Header, to emulator.Addr) {
	out := ina.Header{
		Flags: ina.FlagResult, Job: j.Job, Slot: r.slot[c], Ver: h.Ver, Worker: h.Worker,
		Workers: uint8(len(j.Workers)), Round: r.round, Offset: uint32(c * j.k), Bitmap: j.all,
	}
	if r.ovf[c] {
		out.Flags |= ina.FlagOverflow
	}
	p.buf = ina.Append(p.buf[:0], out, r.values[c*j.k:(c+1)*j.k])
	p.Stats.SentBytes += uint64(len(p.buf))
	p.env.Send(to, p.buf)
}
