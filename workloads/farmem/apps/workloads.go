package apps

import (
	"math"
	"math/rand/v2"
	"time"
)

// Compute costs per page of work, at about 10 GFLOP/s and a few ns per
// element touched. They set how memory-bound each workload is.
const (
	initGap      = 500 * time.Nanosecond // fill a page with generated data
	qsPartGap    = 1 * time.Microsecond  // partition 512 elements of a page
	qsPageGap    = 9 * time.Microsecond  // sort the 512 elements of one page
	luUpdateGap  = 6 * time.Microsecond  // 64 multiply-adds on each of 512 doubles
	luPanelGap   = 2 * time.Microsecond  // factor a page of the panel
	kmPointGap   = 3 * time.Microsecond  // 64 points × 16 centroids × 16 dimensions
	kmUpdateGap  = 1 * time.Microsecond  // recompute the centroids
	prEdgeGap    = 1 * time.Microsecond  // 1024 edges of a page
	prGatherGap  = 30 * time.Nanosecond  // one gather
	prGathers    = 32                    // page-level gathers per edge page
	mcRequestGap = 1 * time.Microsecond  // parse, hash and answer one request
	streamGap    = 100 * time.Nanosecond // 512 doubles at ~40 GB/s
)

// quicksort: pages [0, n) hold the array.
type quicksort struct {
	emitter
	n     int
	r     *rand.Rand
	stack [][2]int
	init  bool
	iters int
}

func newQuicksort(pages int, p Params) Generator {
	q := &quicksort{n: pages, r: rng(p.Seed, 1), iters: orDefault(p.Iterations, 1)}
	q.fill = q.step
	return q
}

func (q *quicksort) Pages() int { return q.n }

func (q *quicksort) step() {
	if !q.init {
		q.initPass(0, q.n, initGap)
		q.init = true
		q.stack = append(q.stack, [2]int{0, q.n})
		return
	}
	for len(q.queue) == 0 {
		if len(q.stack) == 0 {
			q.iters--
			if q.iters <= 0 {
				q.done = true
				return
			}
			q.init = false // sort again: refill the array first
			return
		}
		r := q.stack[len(q.stack)-1]
		q.stack = q.stack[:len(q.stack)-1]
		lo, hi := r[0], r[1]
		if hi-lo <= 1 {
			q.emit(lo, qsPageGap, true)
			continue
		}
		// Partition: the two scans meet somewhere in the range.
		for i, j := lo, hi-1; i <= j; i, j = i+1, j-1 {
			q.emit(i, qsPartGap, true)
			if j != i {
				q.emit(j, qsPartGap, true)
			}
		}
		m := lo + 1 + q.r.IntN(hi-lo-1) // a random pivot splits uniformly
		q.stack = append(q.stack, [2]int{m, hi}, [2]int{lo, m})
	}
}

// linpack: an nc × nc column-major matrix of doubles over pages [0, n).
type linpack struct {
	emitter
	n, dim int
	k, j   int // current panel, current trailing block (j == k: factor the panel)
	iters  int
	init   bool
}

const luBlock = 64

func newLinpack(pages int, p Params) Generator {
	dim := int(math.Sqrt(float64(pages) * PageSize / 8))
	dim -= dim % luBlock
	l := &linpack{dim: dim, iters: orDefault(p.Iterations, 1)}
	l.n = (dim*dim*8 + PageSize - 1) / PageSize
	l.fill = l.step
	return l
}

func (l *linpack) Pages() int { return l.n }

// region emits the pages holding rows [row, dim) of columns [c0, c1).
func (l *linpack) region(c0, c1, row int, gap time.Duration, write bool) {
	last := -1
	for c := c0; c < c1; c++ {
		from := (c*l.dim + row) * 8 / PageSize
		to := ((c+1)*l.dim*8 - 1) / PageSize
		for p := max(from, last+1); p <= to; p++ {
			l.emit(p, gap, write)
			last = p
		}
	}
}

func (l *linpack) step() {
	blocks := l.dim / luBlock
	if !l.init {
		l.initPass(0, l.n, initGap)
		l.init, l.k, l.j = true, 0, 0
		return
	}
	if l.k >= blocks {
		l.iters--
		if l.iters <= 0 {
			l.done = true
			return
		}
		l.init = false
		return
	}
	row := l.k * luBlock
	if l.j == l.k {
		l.region(l.k*luBlock, (l.k+1)*luBlock, row, luPanelGap, true)
	} else {
		l.region(l.k*luBlock, (l.k+1)*luBlock, row, 0, false) // read the panel
		l.region(l.j*luBlock, (l.j+1)*luBlock, row, luUpdateGap, true)
	}
	l.j++
	if l.j >= blocks {
		l.k++
		l.j = l.k
	}
}

// kmeans: page 0 holds the centroids, then the assignment array, then the
// points (64 points of 16 floats per page).
type kmeans struct {
	emitter
	n, labels, points int
	iter, iters       int
	init              bool
}

func newKmeans(pages int, p Params) Generator {
	pts := (pages - 1) * 16 / 17
	k := &kmeans{n: pages, points: pts, labels: pages - 1 - pts, iters: orDefault(p.Iterations, 4)}
	k.fill = k.step
	return k
}

func (k *kmeans) Pages() int { return k.n }

func (k *kmeans) step() {
	first := 1 + k.labels
	if !k.init {
		k.emit(0, initGap, true)
		k.initPass(first, k.n, initGap)
		k.init = true
		return
	}
	if k.iter >= k.iters {
		k.done = true
		return
	}
	for i := range k.points {
		k.emit(0, 0, false) // the centroids: always hot
		k.emit(first+i, kmPointGap, false)
		if i%16 == 15 || i == k.points-1 {
			k.emit(1+min(i/16, k.labels-1), 0, true)
		}
	}
	k.emit(0, kmUpdateGap, true)
	k.iter++
}

// pagerank: offsets, edges, then two rank arrays (old and new, swapping
// roles each iteration).
type pagerank struct {
	emitter
	n                int
	offs, edges, rks int // pages of each array
	iter, iters      int
	e                int // the next edge page of this iteration
	init             bool
	z                *zipf
	perm             []int32
}

// prBlock is how many edge pages pagerank's generator emits at a time (a
// multiple of 4: four edge pages share an offsets page and a ranks page).
const prBlock = 1024

func newPagerank(pages int, p Params) Generator {
	// V vertices, 8 edges each: offsets 8V, edges 32V, ranks 2 × 8V bytes.
	unit := max(1, pages/7)
	g := &pagerank{offs: unit, edges: 4 * unit, rks: unit, iters: orDefault(p.Iterations, 3)}
	g.n = g.offs + g.edges + 2*g.rks
	r := rng(p.Seed, 4)
	g.z = newZipf(r, g.rks, 0.9)
	g.perm = permutation(r, g.rks)
	g.fill = g.step
	return g
}

func (g *pagerank) Pages() int { return g.n }

func (g *pagerank) step() {
	if !g.init {
		g.initPass(0, g.n, initGap)
		g.init = true
		return
	}
	if g.iter >= g.iters {
		g.done = true
		return
	}
	old, nw := g.offs+g.edges, g.offs+g.edges+g.rks
	if g.iter%2 == 1 {
		old, nw = nw, old
	}
	// A block of edge pages at a time: the queue stays small whatever the
	// graph's size (an iteration at full size is 10^7 accesses).
	from := g.e
	g.e = min(g.e+prBlock, g.edges)
	for e := from; e < g.e; e++ {
		if e%4 == 0 {
			g.emit(e/4, 0, false) // the offsets of these edges' vertices
		}
		g.emit(g.offs+e, prEdgeGap, false)
		for range prGathers {
			g.emit(old+int(g.perm[g.z.next()]), prGatherGap, false)
		}
		if e%4 == 3 {
			g.emit(nw+e/4, 0, true) // the new ranks of these vertices
		}
	}
	if g.e == g.edges {
		g.e = 0
		g.iter++
	}
}

// memcached: hash buckets, then slab pages of four 1 KiB items.
type memcached struct {
	emitter
	n, buckets, items int
	requests, left    int
	init              bool
	z                 *zipf
	perm              []int32
	r                 *rand.Rand
}

const (
	mcItemsPerPage  = 4
	mcUpdateShare   = 0.05
	mcRequestsPerWS = 12 // requests per working-set page, by default
)

func newMemcached(pages int, p Params) Generator {
	b := max(1, pages/16)
	m := &memcached{n: pages, buckets: b, items: pages - b, r: rng(p.Seed, 5)}
	keys := m.items * mcItemsPerPage
	m.z = newZipf(m.r, keys, 0.99)
	m.perm = permutation(m.r, keys)
	m.requests = mcRequestsPerWS * pages
	if p.Iterations > 0 {
		m.requests = p.Iterations * 1000
	}
	m.left = m.requests
	m.fill = m.step
	return m
}

func (m *memcached) Pages() int { return m.n }

func (m *memcached) step() {
	if !m.init {
		m.initPass(0, m.n, initGap)
		m.init = true
		return
	}
	for range min(m.left, 1024) {
		key := m.z.next()
		bucket := int(uint64(key) * 0x9e3779b97f4a7c15 >> 32 % uint64(m.buckets))
		m.emit(bucket, mcRequestGap, false)
		m.emit(m.buckets+int(m.perm[key])/mcItemsPerPage, 0, m.r.Float64() < mcUpdateShare)
	}
	m.left -= min(m.left, 1024)
	if m.left == 0 {
		m.done = true
	}
}

// stream: arrays a, b, c of doubles.
type stream struct {
	emitter
	n, size     int
	iter, iters int
	init        bool
}

func newStream(pages int, p Params) Generator {
	s := &stream{size: pages / 3, iters: orDefault(p.Iterations, 2)}
	s.n = 3 * s.size
	s.fill = s.step
	return s
}

func (s *stream) Pages() int { return s.n }

func (s *stream) step() {
	if !s.init {
		s.initPass(0, s.n, initGap)
		s.init = true
		return
	}
	if s.iter >= s.iters*4 {
		s.done = true
		return
	}
	a, b, c := 0, s.size, 2*s.size
	for i := range s.size {
		switch s.iter % 4 {
		case 0: // copy: c = a
			s.emit(a+i, streamGap, false)
			s.emit(c+i, 0, true)
		case 1: // scale: b = q·c
			s.emit(c+i, streamGap, false)
			s.emit(b+i, 0, true)
		case 2: // add: c = a + b
			s.emit(a+i, streamGap, false)
			s.emit(b+i, 0, false)
			s.emit(c+i, 0, true)
		case 3: // triad: a = b + q·c
			s.emit(b+i, streamGap, false)
			s.emit(c+i, 0, false)
			s.emit(a+i, 0, true)
		}
	}
	s.iter++
}
