package apps

import (
	"math"
	"time"

	memtrace "github.com/tracebed/tracebed/traces/mem"
)

// Total is what a generator's stream adds up to.
type Total struct {
	Accesses uint64
	Compute  time.Duration // the sum of the gaps
	// Extrapolated says the figures were extrapolated from shorter
	// streams rather than counted (see Summarize).
	Extrapolated bool
}

// Summarize returns the total accesses and compute of the named workload's
// stream at p, in time that does not grow with p.Iterations.
//
// A stream of at most budget accesses, or one of the workload's default
// length or of one or two iterations (whose length the scale bounds), is
// read to the end and counted exactly. A longer one is extrapolated from
// the streams of one and two iterations, T(n) = T(1) + (n−1)·(T(2) − T(1)):
// every iteration of linpack, kmeans, pagerank and stream does the same
// work and memcached's iterations are blocks of 1,000 requests of two
// accesses each, so for them the figures are exact; quicksort draws its
// pivots at random, so its second sort stands for every later one (the
// figures are then within a few percent, as they are between seeds).
//
// stop is called between blocks of the stream; its error ends the summary
// and is returned.
func Summarize(name string, p Params, budget uint64, stop func() error) (Total, error) {
	g, err := New(name, p)
	if err != nil {
		return Total{}, err
	}
	long := p.Iterations > 2
	if !long {
		budget = math.MaxUint64
	}
	t, done, err := count(g, budget, stop)
	if err != nil || done {
		return t, err
	}
	var ts [2]Total
	for i := range ts {
		q := p
		q.Iterations = i + 1
		g, err := New(name, q)
		if err != nil {
			return Total{}, err
		}
		if ts[i], _, err = count(g, math.MaxUint64, stop); err != nil {
			return Total{}, err
		}
	}
	n := uint64(p.Iterations - 1)
	return Total{
		Accesses:     addMul(ts[0].Accesses, ts[1].Accesses-ts[0].Accesses, n),
		Compute:      time.Duration(min(addMul(uint64(ts[0].Compute), uint64(ts[1].Compute-ts[0].Compute), n), math.MaxInt64)),
		Extrapolated: true,
	}, nil
}

// count reads src until its end (done) or until it has counted more than
// budget accesses.
func count(src memtrace.Source, budget uint64, stop func() error) (t Total, done bool, err error) {
	t.Accesses, done, err = memtrace.Scan(src, budget, stop, func(acc []memtrace.Access) error {
		for _, a := range acc {
			t.Compute += a.Gap
		}
		return nil
	})
	return t, done, err
}

// addMul returns a + b·n, saturating at the largest uint64.
func addMul(a, b, n uint64) uint64 {
	if n != 0 && b > (math.MaxUint64-a)/n {
		return math.MaxUint64
	}
	return a + b*n
}
