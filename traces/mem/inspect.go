package memtrace

import (
	"errors"
	"io"
	"math/bits"

	"github.com/tracebed/tracebed/internal/problems"
)

// InspectOptions tune Inspect.
type InspectOptions struct {
	// Lackey are the import options for lackey output.
	Lackey LackeyOptions
	// Reuse asks for the reuse-distance histogram.
	Reuse bool
	// MaxProblems is how many bad lines of a text or lackey trace are
	// reported before the rest are only counted; 0 stops at the first.
	// A binary trace stops at its first problem: after a corrupt chunk,
	// page numbers (stored as differences) cannot be trusted.
	MaxProblems int
}

// Info is what Inspect learns about a trace by reading it once.
type Info struct {
	Format Format
	// Version is the binary format's version (0 for other formats).
	Version int
	Header  Header
	Stats   Stats
	// Lines and DataAccesses count lackey's lines (instructions and data
	// accesses) and its data accesses, before merging into page accesses.
	Lines, DataAccesses uint64
	// Reuse is the reuse-distance histogram, when asked for.
	Reuse *ReuseHistogram
}

// Inspect reads a trace from r to its end, streaming, and summarises it.
// With MaxProblems set, it goes on past bad lines and returns all of them
// (joined) with the summary of the good ones.
func Inspect(name string, r io.Reader, opts InspectOptions) (*Info, error) {
	var p *problems.List
	if opts.MaxProblems > 0 {
		p = &problems.List{Limit: opts.MaxProblems}
	}
	lo := opts.Lackey
	if lo.PageSize == 0 && lo.NsPerInstruction == 0 {
		lo = DefaultLackeyOptions()
	}
	h, src, err := openReader(name, r, lo, p)
	if err != nil {
		return nil, errors.Join(p.Err(), err)
	}
	info := &Info{Header: h}
	if opts.Reuse {
		info.Reuse = &ReuseHistogram{}
	}
	var c statsCounter
	var rt *reuseTracker
	if opts.Reuse {
		rt = newReuseTracker()
	}
	buf := make([]Access, 4096)
	for {
		n, rerr := src.Read(buf)
		c.add(buf[:n])
		if rt != nil {
			for _, a := range buf[:n] {
				rt.access(a.Page, info.Reuse)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
	}
	info.Stats = c.stats()
	switch s := src.(type) {
	case *Reader:
		info.Format, info.Version = Binary, s.Version()
	case *TextReader:
		info.Format = Text
	case *LackeyReader:
		info.Format, info.Header = Lackey, s.Header()
		info.Lines, info.DataAccesses = s.Lines(), s.DataAccesses()
	}
	return info, errors.Join(p.Err(), err)
}

// ReuseHistogram counts accesses by reuse distance: the number of distinct
// other pages touched since the previous access to the same page (the LRU
// stack distance). An access at distance d hits in an LRU memory of more
// than d pages, so the histogram's cumulative sum is the hit ratio of LRU
// as a function of local memory.
type ReuseHistogram struct {
	// Cold counts first touches (infinite distance).
	Cold uint64
	// Buckets[0] counts distance 0; Buckets[k], k ≥ 1, distances in
	// [2^(k-1), 2^k).
	Buckets []uint64
}

// Bucket returns the bucket of distance d.
func Bucket(d uint64) int { return bits.Len64(d) }

// BucketRange returns the distances [lo, hi] of bucket k.
func BucketRange(k int) (lo, hi uint64) {
	if k == 0 {
		return 0, 0
	}
	return 1 << (k - 1), 1<<k - 1
}

func (h *ReuseHistogram) add(d uint64) {
	k := Bucket(d)
	for len(h.Buckets) <= k {
		h.Buckets = append(h.Buckets, 0)
	}
	h.Buckets[k]++
}

// reuseTracker computes reuse distances in O(log footprint) per access with
// memory proportional to the footprint: a Fenwick tree over time slots
// holds a 1 at the slot of each page's latest access, so the distance of an
// access is the count of ones after its page's previous slot. When the
// slots run out, the live ones are renumbered in order.
type reuseTracker struct {
	slot  map[uint64]uint32 // page → slot of its latest access
	page  []uint64          // slot → page, or noPage
	tree  []int32           // Fenwick tree over slots, 1-based
	next  uint32
	alive int32
}

const noPage = ^uint64(0)

func newReuseTracker() *reuseTracker {
	t := &reuseTracker{slot: map[uint64]uint32{}}
	t.resize(1 << 12)
	return t
}

func (t *reuseTracker) resize(n int) {
	t.page = make([]uint64, n)
	for i := range t.page {
		t.page[i] = noPage
	}
	t.tree = make([]int32, n+1)
}

func (t *reuseTracker) update(i uint32, v int32) {
	for j := int(i) + 1; j < len(t.tree); j += j & -j {
		t.tree[j] += v
	}
}

// prefix returns the ones in slots [0, i).
func (t *reuseTracker) prefix(i uint32) int32 {
	var s int32
	for j := int(i); j > 0; j -= j & -j {
		s += t.tree[j]
	}
	return s
}

func (t *reuseTracker) access(p uint64, h *ReuseHistogram) {
	if int(t.next) == len(t.page) {
		t.compact()
	}
	if s, ok := t.slot[p]; ok {
		h.add(uint64(t.alive - t.prefix(s+1)))
		t.update(s, -1)
		t.page[s] = noPage
		t.alive--
	} else {
		h.Cold++
	}
	t.slot[p] = t.next
	t.page[t.next] = p
	t.update(t.next, 1)
	t.next++
	t.alive++
}

// compact renumbers the live slots 0, 1, … in order, in a table at least
// twice their number.
func (t *reuseTracker) compact() {
	live := make([]uint64, 0, t.alive)
	for _, p := range t.page[:t.next] {
		if p != noPage {
			live = append(live, p)
		}
	}
	t.resize(max(1<<12, 2*len(live)))
	for i, p := range live {
		t.slot[p] = uint32(i)
		t.page[i] = p
	}
	// Build the tree in O(n): each node adds itself to its parent.
	for i := range live {
		t.tree[i+1]++
	}
	for j := 1; j < len(t.tree); j++ {
		if k := j + j&-j; k < len(t.tree) {
			t.tree[k] += t.tree[j]
		}
	}
	t.next = uint32(len(live))
}
