package apps

import (
	"math"
	"slices"
	"strings"
	"testing"

	memtrace "github.com/tracebed/tracebed/traces/mem"
)

func trace(t *testing.T, name string, p Params) (Generator, []memtrace.Access) {
	t.Helper()
	g, err := New(name, p)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := memtrace.ReadAll(g)
	if err != nil {
		t.Fatal(err)
	}
	return g, acc
}

func TestWorkloads(t *testing.T) {
	for _, w := range Workloads {
		t.Run(w.Name, func(t *testing.T) {
			p := Params{Scale: 128, Seed: 1}
			g, acc := trace(t, w.Name, p)
			full := int(w.FullSize / PageSize / 128)
			if g.Pages() < full*9/10 || g.Pages() > full {
				t.Errorf("%d pages, want about %d (full size / scale)", g.Pages(), full)
			}
			touched := make([]bool, g.Pages())
			var writes int
			for i, a := range acc {
				if a.Page >= uint64(g.Pages()) {
					t.Fatalf("access %d: page %d outside [0, %d)", i, a.Page, g.Pages())
				}
				if !touched[a.Page] && !a.Write {
					t.Fatalf("access %d reads page %d before anything wrote it (no initialization)", i, a.Page)
				}
				touched[a.Page] = true
				if a.Write {
					writes++
				}
			}
			if i := slices.Index(touched, false); i >= 0 {
				t.Errorf("page %d of the working set is never touched", i)
			}
			_, again := trace(t, w.Name, p)
			if !slices.Equal(acc, again) {
				t.Error("the same seed gave a different trace")
			}
			st, _ := memtrace.Summarize(memtrace.NewSliceSource(acc))
			t.Logf("%s: %d pages, %v; %.1f accesses per page", w.Name, g.Pages(), st, float64(len(acc))/float64(g.Pages()))
		})
	}
}

func TestSeedsDiffer(t *testing.T) {
	for _, name := range []string{"quicksort", "pagerank", "memcached"} {
		_, a := trace(t, name, Params{Scale: 256, Seed: 1})
		_, b := trace(t, name, Params{Scale: 256, Seed: 2})
		if slices.Equal(a, b) {
			t.Errorf("%s: seeds 1 and 2 gave the same trace", name)
		}
	}
}

func TestScaleDividesWorkingSet(t *testing.T) {
	for _, w := range Workloads {
		a, _ := WorkingSet(w.Name, 64)
		b, _ := WorkingSet(w.Name, 128)
		// linpack's matrix side is a multiple of its 64-column panels,
		// which rounds its working set down by up to a few percent.
		if r := float64(a) / float64(b); r < 1.85 || r > 2.1 {
			t.Errorf("%s: %d pages at scale 64, %d at 128; want a factor of about 2", w.Name, a, b)
		}
	}
}

func TestBadParams(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Params
		want string
	}{
		{"quicksort", Params{Scale: 0.5}, "scale"},
		{"quicksort", Params{Scale: 1e9}, "at least 64"},
		{"nope", Params{Scale: 1}, "not a workload"},
		{"stream", Params{Scale: 1, Iterations: -1}, "iterations"},
	} {
		if _, err := New(tc.name, tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s, %+v): %v, want %q", tc.name, tc.p, err, tc.want)
		}
	}
}

// TestZipf checks the sampler against the Zipf law: exactly for the two
// most popular ranks, and for the share of the top tenth (Gray et al.'s
// method, like YCSB's, approximates the ranks below).
func TestZipf(t *testing.T) {
	const keys, n, theta = 1000, 200000, 0.99
	z := newZipf(rng(1, 1), keys, theta)
	var c [2]int
	top := 0
	for range n {
		v := z.next()
		if v < 2 {
			c[v]++
		}
		if v < keys/10 {
			top++
		}
	}
	// P(0)/P(1) = 2^0.99 ≈ 1.99.
	if r := float64(c[0]) / float64(c[1]); r < 1.85 || r > 2.15 {
		t.Errorf("P(0)/P(1) = %.2f, want about 1.99", r)
	}
	var head, all float64
	for i := 1; i <= keys; i++ {
		p := 1 / math.Pow(float64(i), theta)
		all += p
		if i <= keys/10 {
			head += p
		}
	}
	if got, want := float64(top)/n, head/all; math.Abs(got-want) > 0.03 {
		t.Errorf("top tenth of the keys drew %.3f of the requests, want %.3f", got, want)
	}
}

func BenchmarkGenerate(b *testing.B) {
	for _, w := range Workloads {
		b.Run(w.Name, func(b *testing.B) {
			buf := make([]memtrace.Access, 4096)
			n := 0
			for n < b.N {
				g, _ := New(w.Name, Params{Scale: 128, Seed: 1})
				for n < b.N {
					k, err := g.Read(buf)
					n += k
					if err != nil {
						break
					}
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "accesses/s")
		})
	}
}
