// Package apps generates the page-access traces of the applications tracebed's
// far-memory experiments run: a set after Fastswap's evaluation (Amaro et
// al., "Can far memory improve job throughput?", EuroSys '20) — quicksort,
// linpack, kmeans, pagerank, memcached with YCSB-like Zipf keys, and the
// STREAM kernels.
//
// Each generator is a memtrace.Source that produces its accesses on the fly,
// deterministic for a seed. The accesses are page-level: one access stands
// for the application's work on one page (the compute gap before it is that
// work's CPU time), so consecutive touches of the same page are one access,
// as in an imported lackey trace. Each workload documents its full-size
// working set; Scale divides every working set by one factor (memory_scale in
// the experiment spec, which divides Fastswap's page constants by the same
// factor), keeping each workload's access pattern and compute per page.
//
// Page numbers are dense, [0, Pages()), laid out as the application's arrays
// would be; every workload first initializes (writes) its data, as a real
// program fills its arrays before computing on them.
package apps

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	memtrace "github.com/tracebed/tracebed/traces/mem"
)

var errEOF = io.EOF

// PageSize is the page size the generators assume (4 KiB).
const PageSize = 4096

// Params configure a generator.
type Params struct {
	// Scale divides the full-size working set: 1 is full size, 128 gives
	// working sets of a few thousand pages. Must be at least 1.
	Scale float64
	// Seed makes the trace reproducible.
	Seed uint64
	// Iterations overrides the workload's number of passes (iterative
	// workloads) or its operation count in thousands (memcached); 0 keeps
	// the default.
	Iterations int
}

// Workload describes one generator.
type Workload struct {
	Name string
	// FullSize is the working set at Scale 1, in bytes.
	FullSize int64
	// Pattern says what the generator does, for docs and `tracebed` help.
	Pattern string
	// New returns the generator for a working set of pages pages.
	New func(pages int, p Params) Generator
}

// Generator is a trace generator: a memtrace.Source that knows its size.
type Generator interface {
	memtrace.Source
	// Pages is the working set: page numbers lie in [0, Pages()).
	Pages() int
}

// Workloads lists the generators, by name.
var Workloads = []Workload{
	{Name: "quicksort", FullSize: 2 << 30, New: newQuicksort,
		Pattern: "in-place quicksort of 8-byte integers: an initializing write pass, then recursive partitions; each partition sweeps its range from both ends, reading and swapping (writes), down to single pages, which are sorted in place"},
	{Name: "linpack", FullSize: 1 << 30, New: newLinpack,
		Pattern: "blocked right-looking LU factorization of a column-major matrix of doubles (64-column panels): each panel is factored, then every trailing column block is updated (read and written), so the active region shrinks; compute-bound"},
	{Name: "kmeans", FullSize: 2 << 30, New: newKmeans,
		Pattern: "Lloyd's k-means over 16-dimensional float points, 16 centroids: each iteration reads every point page in order (the centroid page, always hot, with each) and writes the assignment array"},
	{Name: "pagerank", FullSize: 2 << 30, New: newPagerank,
		Pattern: "pull-based PageRank over a CSR graph: each iteration streams the edge array, gathers from the rank array with Zipf(0.9) popularity (power-law in-degrees) and writes the new ranks in order"},
	{Name: "memcached", FullSize: 2 << 30, New: newMemcached,
		Pattern: "key-value store under a YCSB-like load: a load phase writes every item page, then each request reads a random hash-bucket page and the item's page; keys Zipf(0.99), 95% reads and 5% updates (writes), items scattered over slab pages"},
	{Name: "stream", FullSize: 3 << 29, New: newStream,
		Pattern: "the STREAM kernels over three arrays of doubles: copy, scale, add and triad, each reading one or two arrays in order and writing a third; memory-bound (little compute per page)"},
}

// Names lists the workload names.
func Names() []string {
	var n []string
	for _, w := range Workloads {
		n = append(n, w.Name)
	}
	return n
}

// Lookup returns the named workload.
func Lookup(name string) (Workload, error) {
	for _, w := range Workloads {
		if w.Name == name {
			return w, nil
		}
	}
	return Workload{}, fmt.Errorf("%q is not a workload; want one of %s", name, strings.Join(Names(), ", "))
}

// New returns the named generator at p.Scale.
func New(name string, p Params) (Generator, error) {
	w, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if p.Scale < 1 || math.IsNaN(p.Scale) || math.IsInf(p.Scale, 0) {
		return nil, fmt.Errorf("scale %v: want 1 or more (it divides the working set)", p.Scale)
	}
	if p.Iterations < 0 || p.Iterations > 1e6 {
		return nil, fmt.Errorf("iterations %d: want 0 (default) to 1000000", p.Iterations)
	}
	pages := int(math.Round(float64(w.FullSize) / PageSize / p.Scale))
	if pages < 64 {
		return nil, fmt.Errorf("%s at scale %v has %d pages; want at least 64 (lower the scale)", name, p.Scale, pages)
	}
	return w.New(pages, p), nil
}

// WorkingSet returns the working set, in pages, of the named workload at
// the given scale.
func WorkingSet(name string, scale float64) (int, error) {
	g, err := New(name, Params{Scale: scale})
	if err != nil {
		return 0, err
	}
	return g.Pages(), nil
}

// emitter is the common machinery: a generator is a state machine that
// refills a small queue of accesses on demand.
type emitter struct {
	queue []memtrace.Access
	head  int
	done  bool
	fill  func() // appends to queue, or sets done
}

func (e *emitter) Read(buf []memtrace.Access) (int, error) {
	n := 0
	for n < len(buf) {
		if e.head == len(e.queue) {
			if e.done {
				break
			}
			e.queue, e.head = e.queue[:0], 0
			e.fill()
			continue
		}
		k := copy(buf[n:], e.queue[e.head:])
		e.head += k
		n += k
	}
	if n == 0 {
		return 0, errEOF
	}
	return n, nil
}

func (e *emitter) emit(page int, gap time.Duration, write bool) {
	e.queue = append(e.queue, memtrace.Access{Page: uint64(page), Gap: gap, Write: write})
}

// initPass writes pages [lo, hi) in order, gap each.
func (e *emitter) initPass(lo, hi int, gap time.Duration) {
	for p := lo; p < hi; p++ {
		e.emit(p, gap, true)
	}
}

func rng(seed uint64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream^0x6170707367656e73))
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// zipf draws ranks in [0, n) with P(rank i) ∝ 1/(i+1)^theta, for any theta
// in (0, 1) ∪ (1, ∞): Gray et al.'s method as YCSB's ZipfianGenerator uses
// it ("Quickly generating billion-record synthetic databases", SIGMOD '94).
type zipf struct {
	n                   float64
	theta, alpha, zetan float64
	eta, half           float64
	r                   *rand.Rand
}

func newZipf(r *rand.Rand, n int, theta float64) *zipf {
	z := &zipf{n: float64(n), theta: theta, r: r}
	var zeta2 float64
	for i := 1; i <= n; i++ {
		v := 1 / math.Pow(float64(i), theta)
		z.zetan += v
		if i <= 2 {
			zeta2 += v
		}
	}
	z.alpha = 1 / (1 - theta)
	z.eta = (1 - math.Pow(2/z.n, 1-theta)) / (1 - zeta2/z.zetan)
	z.half = 1 + math.Pow(0.5, theta)
	return z
}

func (z *zipf) next() int {
	u := z.r.Float64()
	uz := u * z.zetan
	if uz < 1 {
		return 0
	}
	if uz < z.half {
		return 1
	}
	v := int(z.n * math.Pow(z.eta*u-z.eta+1, z.alpha))
	return min(max(v, 0), int(z.n)-1)
}

// permutation returns a seeded random permutation of [0, n).
func permutation(r *rand.Rand, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i)
	}
	r.Shuffle(n, func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}
