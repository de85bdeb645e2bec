package farmem

import (
	"fmt"

	memtrace "github.com/tracebed/tracebed/traces/mem"
	"github.com/tracebed/tracebed/workloads/farmem/paging"
)

// pagingLoad is the paging traffic of an access stream replayed through a
// page cache of a fixed number of frames: the major faults (reads of pages
// evicted before) and the write-backs (dirty pages evicted), over the
// accesses replayed.
type pagingLoad struct {
	accesses      uint64
	reads, writes uint64
}

// frameCache is the resident set of a replay: it keeps at most its frames'
// worth of pages and picks the victims.
type frameCache interface {
	// hit records an access to page p and reports whether p is resident.
	hit(p int32) bool
	// insert makes p resident, after evicting a victim (returned) when
	// every frame is taken; -1 when none was.
	insert(p int32) int32
}

// replayLoad replays at most budget accesses of src, whose pages are below
// pages, through a cache of frames frames with replacement repl (the hosts'
// clock or LRU, without their asynchronous reclaim). A page's first touch
// maps a zero-filled page (no read, dirty); a dirty page evicted is written
// back; a page evicted before and touched again is read back. stop is
// called between blocks; its error ends the replay.
func replayLoad(src memtrace.Source, pages, frames int, repl paging.Replacement, budget uint64, stop func() error) (pagingLoad, error) {
	var c frameCache = newClockCache(pages, frames)
	if repl == paging.LRU {
		c = newLRUCache(pages, frames)
	}
	seen := make([]bool, pages)
	dirty := make([]bool, pages)
	var l pagingLoad
	var err error
	l.accesses, _, err = memtrace.Scan(src, budget, stop, func(acc []memtrace.Access) error {
		for _, a := range acc {
			if a.Page >= uint64(pages) {
				return fmt.Errorf("page %d beyond the working set of %d pages", a.Page, pages)
			}
			p := int32(a.Page)
			if !c.hit(p) {
				if v := c.insert(p); v >= 0 && dirty[v] {
					l.writes++
					dirty[v] = false
				}
				if seen[p] {
					l.reads++
				} else {
					seen[p], dirty[p] = true, true
				}
			}
			dirty[p] = dirty[p] || a.Write
		}
		return nil
	})
	return l, err
}

// clockCache is second chance over the frames, as paging.Host picks its
// victims.
type clockCache struct {
	frame []int32 // each page's frame, or -1
	slot  []int32 // each frame's page
	ref   []bool  // by page
	used  int
	hand  int
}

func newClockCache(pages, frames int) *clockCache {
	c := &clockCache{frame: make([]int32, pages), slot: make([]int32, frames), ref: make([]bool, pages)}
	for i := range c.frame {
		c.frame[i] = -1
	}
	return c
}

func (c *clockCache) hit(p int32) bool {
	if c.frame[p] < 0 {
		return false
	}
	c.ref[p] = true
	return true
}

func (c *clockCache) insert(p int32) int32 {
	victim := int32(-1)
	f := c.used
	if c.used == len(c.slot) {
		for c.ref[c.slot[c.hand]] {
			c.ref[c.slot[c.hand]] = false
			c.hand = (c.hand + 1) % len(c.slot)
		}
		f, victim = c.hand, c.slot[c.hand]
		c.frame[victim] = -1
		c.hand = (c.hand + 1) % len(c.slot)
	} else {
		c.used++
	}
	c.slot[f], c.frame[p], c.ref[p] = p, int32(f), true
	return victim
}

// lruCache is exact least-recently-used.
type lruCache struct {
	prev, next []int32 // the recency list, most recent at head
	in         []bool
	head, tail int32
	used, max  int
}

func newLRUCache(pages, frames int) *lruCache {
	return &lruCache{prev: make([]int32, pages), next: make([]int32, pages), in: make([]bool, pages), head: -1, tail: -1, max: frames}
}

func (c *lruCache) unlink(p int32) {
	if q := c.prev[p]; q >= 0 {
		c.next[q] = c.next[p]
	} else {
		c.head = c.next[p]
	}
	if q := c.next[p]; q >= 0 {
		c.prev[q] = c.prev[p]
	} else {
		c.tail = c.prev[p]
	}
}

func (c *lruCache) push(p int32) {
	c.prev[p], c.next[p] = -1, c.head
	if c.head >= 0 {
		c.prev[c.head] = p
	}
	c.head = p
	if c.tail < 0 {
		c.tail = p
	}
}

func (c *lruCache) hit(p int32) bool {
	if !c.in[p] {
		return false
	}
	c.unlink(p)
	c.push(p)
	return true
}

func (c *lruCache) insert(p int32) int32 {
	victim := int32(-1)
	if c.used == c.max {
		victim = c.tail
		c.unlink(victim)
		c.in[victim] = false
	} else {
		c.used++
	}
	c.in[p] = true
	c.push(p)
	return victim
}
