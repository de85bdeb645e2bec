package analysis

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tracebed/tracebed/internal/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// checkGolden compares got with testdata/name, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", name), got, *update, "./analysis")
}

// The synthetic results files in testdata follow the series and params
// conventions of the INA and far-memory experiments (docs/analysis.md),
// with made-up but plausible numbers. They are generated here so that they
// stay valid as the schema grows; -update rewrites them.

func ecdf(samples []float64) []Point {
	s := slices.Clone(samples)
	slices.Sort(s)
	pts := make([]Point, len(s))
	for i, v := range s {
		pts[i] = Point{round(v, 3), float64(i+1) / float64(len(s))}
	}
	return pts
}

func round(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}

// syntheticINA is a DynaINA-style sweep: four policies, switch memory of
// 1024/4096/16384 aggregators at two loads, two seeds.
func syntheticINA() *Results {
	r := &Results{
		Schema: Schema, Experiment: "ina-synthetic", Kind: "ina", Substrate: "sim", Seed: 1, Seeds: []int64{1, 2}, Scale: 1,
		Version: "0.1.0-test", Spec: "experiments/ina.yaml", SpecHash: "00aa", Policies: []string{"dynaina", "switchml", "atp", "noina"},
		Metrics: []MetricInfo{
			{Name: "avg_jct_s", Unit: "s", Better: Lower, Description: "mean job completion time"},
			{Name: "makespan_s", Unit: "s", Better: Lower, Description: "time until the last job finished"},
			{Name: "mem_util", Unit: "fraction", Better: Higher, Description: "aggregator-seconds holding a partial aggregate over all aggregator-seconds"},
			{Name: "ina_fraction", Unit: "fraction", Better: Higher, Description: "share of gradient bytes aggregated in a switch"},
			{Name: "fallback_bytes", Unit: "B", Better: Lower, Description: "gradient bytes aggregated on hosts"},
		},
		SeriesInfo: []SeriesInfo{
			{Name: "jct_cdf", Kind: "cdf", XLabel: "job completion time (s)", YLabel: "fraction of jobs"},
			{Name: "mem_util", Kind: "time", XLabel: "time (s)", YLabel: "aggregator memory in use (fraction)"},
		},
	}
	gain := map[string]float64{"dynaina": 0.55, "switchml": 0.75, "atp": 0.7, "noina": 1}
	for _, load := range []float64{0.5, 0.9} {
		for _, agg := range []float64{1024, 4096, 16384} {
			sc := fmt.Sprintf("agg%g-load%g", agg, load)
			r.Scenarios = append(r.Scenarios, sc)
			for _, p := range r.Policies {
				for _, seed := range r.Seeds {
					rng := rand.New(rand.NewPCG(uint64(seed), uint64(agg)))
					// More memory helps every INA policy, with diminishing returns.
					g := gain[p]
					if p != "noina" {
						g = 1 - (1-g)*(1-math.Exp(-agg/4096))
					}
					var jcts []float64
					jobs := EntityTable{Name: "jobs", Entity: "job", Labels: []string{"model"}, Columns: []MetricInfo{
						{Name: "jct_s", Unit: "s", Better: Lower}, {Name: "bound_s", Unit: "s"}, {Name: "slowdown", Better: Lower},
					}}
					slow := rand.New(rand.NewPCG(uint64(seed), 3))
					for i := range 12 {
						jct := (40 + rng.Float64()*160) * g * (1 + load)
						jcts = append(jcts, jct)
						bound := round(jct/(g*(1+load)*(1+0.2*slow.Float64())), 3)
						jobs.Rows = append(jobs.Rows, EntityRow{ID: fmt.Sprint(i), Labels: map[string]string{"model": "vgg16"},
							Values: map[string]float64{"jct_s": round(jct, 3), "bound_s": bound, "slowdown": round(jct/bound, 4)}})
					}
					var sum, mx float64
					for _, j := range jcts {
						sum += j
						mx = max(mx, j)
					}
					util := 0.0
					var mem []Point
					if p != "noina" {
						util = round(0.3+0.6*(1-g)+0.05*rng.Float64(), 4)
						for i := range 10 {
							mem = append(mem, Point{float64(i * 30), round(util*(0.8+0.4*rng.Float64()), 4)})
						}
					} else {
						for i := range 10 {
							mem = append(mem, Point{float64(i * 30), 0})
						}
					}
					ina := 0.0
					if p != "noina" {
						ina = round(1-g*0.5, 4)
					}
					r.Runs = append(r.Runs, Run{
						Policy: p, Scenario: sc, Seed: seed,
						Metrics: map[string]float64{
							"avg_jct_s": round(sum/float64(len(jcts)), 3), "makespan_s": round(mx, 3),
							"mem_util": util, "ina_fraction": ina, "fallback_bytes": math.Round((1 - ina) * 8e9),
						},
						Series: map[string][]Point{"jct_cdf": ecdf(jcts), "mem_util": mem},
						Params: map[string]float64{"aggregators": agg, "load": load},
						Tables: []EntityTable{jobs},
					})
				}
			}
		}
	}
	r.Sort()
	return r
}

// syntheticFarmem is a Glitter-style sweep over the local memory ratio.
func syntheticFarmem() *Results {
	r := &Results{
		Schema: Schema, Experiment: "farmem-synthetic", Kind: "farmem", Substrate: "sim", Seed: 7, Seeds: []int64{7}, Scale: 1,
		Version: "0.1.0-test", Commit: "0123456789ab", Spec: "experiments/farmem.yaml", SpecHash: "00bb",
		Policies: []string{"fastswap", "glitter", "glitter-host-only", "glitter-net-only"},
		Metrics: []MetricInfo{
			{Name: "throughput_ops", Unit: "ops/s", Better: Higher, Description: "application operations per second"},
			{Name: "completion_s", Unit: "s", Better: Lower},
			{Name: "blocking_events", Unit: "events", Better: Lower},
			{Name: "blocking_time_s", Unit: "s", Better: Lower},
			{Name: "fault_p50_us", Unit: "us", Better: Lower},
			{Name: "fault_p99_us", Unit: "us", Better: Lower},
			{Name: "evicted_pages", Unit: "pages"},
			{Name: "integrity_errors", Unit: "pages", Better: Lower, Description: "pages read back different from the last version written"},
		},
		// No SeriesInfo: the plots must fall back to the conventions.
	}
	speed := map[string]float64{"fastswap": 1, "glitter": 1.45, "glitter-host-only": 1.3, "glitter-net-only": 1.1}
	for _, ratio := range []float64{0.5, 0.75, 0.9} {
		sc := fmt.Sprintf("local-%g", ratio)
		r.Scenarios = append(r.Scenarios, sc)
		for _, p := range r.Policies {
			rng := rand.New(rand.NewPCG(7, uint64(ratio*100)))
			thr := round(1e5*ratio*speed[p], 1)
			nblock := int(40 * (1 - ratio) / speed[p] / speed[p])
			var blocking []Point
			var blockTime float64
			t := 0.0
			for range nblock {
				t += rng.ExpFloat64() * 0.2
				d := rng.ExpFloat64() * 2 / speed[p]
				blockTime += d / 1000
				blocking = append(blocking, Point{round(t, 4), round(d, 3)})
			}
			var lat []float64
			for range 30 {
				lat = append(lat, 4+rng.ExpFloat64()*6/speed[p])
			}
			cdf := ecdf(lat)
			r.Runs = append(r.Runs, Run{
				Policy: p, Scenario: sc, Seed: 7,
				Metrics: map[string]float64{
					"throughput_ops": thr, "completion_s": round(1e6/thr, 3), "blocking_events": float64(nblock),
					"blocking_time_s": round(blockTime, 6), "fault_p50_us": cdf[14].X, "fault_p99_us": cdf[29].X,
					"evicted_pages": math.Round(50000 * (1 - ratio)), "integrity_errors": 0,
				},
				Series: map[string][]Point{"fault_latency_cdf": cdf, "blocking": blocking},
				Params: map[string]float64{"local_memory_ratio": ratio},
			})
		}
	}
	r.Sort()
	return r
}

// TestSyntheticFiles keeps testdata/*.results.json in step with their
// generators; other tests (here and in cmd/tracebed) read the files.
func TestSyntheticFiles(t *testing.T) {
	for name, r := range map[string]*Results{"ina.results.json": syntheticINA(), "farmem.results.json": syntheticFarmem()} {
		data, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		checkGolden(t, name, data)
		if _, err := Read(filepath.Join("testdata", name)); err != nil {
			t.Errorf("Read(%s): %v", name, err)
		}
	}
}
