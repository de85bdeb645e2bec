package training

import (
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/tracebed/tracebed/analysis"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/workloads/training/flow"
)

func TestAggregation(t *testing.T) {
	for _, tc := range []struct {
		name        string
		jobs        []flow.JobResult
		gbps, share float64
	}{
		{"none", nil, 0, 0},
		{"single worker ignored", []flow.JobResult{{Workers: 1, Gradient: 1e9, RingTime: 1, RingRounds: 1}}, 0, 0},
		// 4 workers × 1 GB × 8 bits ÷ 2 s = 16 Gbps; 3 of 4 rounds in a switch.
		{"one job", []flow.JobResult{{Workers: 4, Gradient: 1e9, INATime: 1.5, RingTime: 0.5, INARounds: 3, RingRounds: 1}}, 16, 0.25},
		{"two jobs add", []flow.JobResult{{Workers: 2, Gradient: 1e9, INATime: 1, INARounds: 1}, {Workers: 2, Gradient: 2e9, RingTime: 4, RingRounds: 1}}, 16 + 8, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, s := aggregation(tc.jobs)
			if math.Abs(g-tc.gbps) > 1e-9 || math.Abs(s-tc.share) > 1e-12 {
				t.Errorf("aggregation = %v Gbps, ps share %v; want %v, %v", g, s, tc.gbps, tc.share)
			}
		})
	}
}

// freeSpec is a ready spec with some scenarios and policies (nil: all),
// every job of its scenarios' job lists running the given iterations.
func freeSpec(t *testing.T, name string, scenarios, policies []string, iterations int) *experiments.Spec {
	t.Helper()
	spec := readySpec(t, name, scenarios, policies)
	var set func(n *yaml.Node)
	set = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for k := 0; k+1 < len(n.Content); k += 2 {
				if n.Content[k].Value == "iterations" {
					n.Content[k+1].Value = strconv.Itoa(iterations)
				}
			}
		}
		for _, c := range n.Content {
			set(c)
		}
	}
	for _, sc := range spec.Scenarios {
		if sc.Node != nil {
			set(sc.Node)
		}
	}
	return spec
}

// TestFreeINASpec: the ready freeina-100g spec in the default suite, on
// the flow model: a policy of each system, FreeINA's metrics in every
// run, and the table of FreeINA against ATP with the paper's numbers
// beside the speedup of one job and the throughput of several. Specs
// without FreeINA keep their metrics.
func TestFreeINASpec(t *testing.T) {
	spec := freeSpec(t, "freeina-100g", []string{"single-vgg16", "jobs-16"}, nil, 4)
	if !spec.Default {
		t.Error("freeina-100g is not in the default suite")
	}
	res := execute(t, spec, nil)
	again := execute(t, freeSpec(t, "freeina-100g", []string{"single-vgg16", "jobs-16"}, nil, 4), nil)
	sameRuns(t, res, again)
	for _, r := range res.Runs {
		if _, ok := r.Metrics[MetricAggGbps]; !ok {
			t.Fatalf("run %s/%s has no %s", r.Scenario, r.Policy, MetricAggGbps)
		}
	}
	fa := res.Aggregate("jobs-16", "freeina")
	if fa[MetricAggGbps].Mean <= 0 || fa[MetricPSShare].Mean <= 0 || fa[MetricPSShare].Mean >= 1 {
		t.Errorf("16 jobs: FreeINA's agg_gbps %v, ps_share %v; want both paths used", fa[MetricAggGbps].Mean, fa[MetricPSShare].Mean)
	}
	exp, err := Kind{}.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	tables := exp.(experiments.Summarizer).Summarize(res)
	i := slices.IndexFunc(tables, func(tb analysis.Table) bool { return strings.Contains(tb.Title, "freeina against atp") })
	if i < 0 {
		t.Fatalf("no table of FreeINA against ATP among %d", len(tables))
	}
	var text strings.Builder
	for _, row := range tables[i].Rows {
		text.WriteString(strings.Join(row, " | ") + "\n")
	}
	t.Logf("\n%s", text.String())
	for _, want := range []string{"single-vgg16 | 1 | ", "| 1.20× |", "jobs-16 | 16 | ", "| 2.65× |"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the table has no %q", want)
		}
	}
	// A spec without FreeINA: the ina kind's five metrics, as before.
	d, err := Kind{}.Compile(readySpec(t, "dynaina-100g", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(d.Metrics()); n != 5 {
		t.Errorf("dynaina-100g has %d metrics; want the 5 it had", n)
	}
}

// TestFreeINAPacketSim runs freeina-netns's two-job scenario with packets
// on sim, shortened: FreeINA's RDMA hosts exact (the run fails
// otherwise), some of its all-reduces on each path (memory for one job's
// window: the hosts take the PS path when none is granted), ATP beside
// it.
func TestFreeINAPacketSim(t *testing.T) {
	spec := freeSpec(t, "freeina-netns", []string{"jobs-2"}, nil, 3)
	res := execute(t, spec, nil)
	// Deterministic on sim: FreeINA's run again, alone.
	again := execute(t, freeSpec(t, "freeina-netns", []string{"jobs-2"}, []string{"freeina"}, 3), nil)
	res1 := *res
	res1.Runs = slices.DeleteFunc(slices.Clone(res.Runs), func(r analysis.Run) bool { return r.Policy != "freeina" })
	sameRuns(t, &res1, again)
	fa, aa := res.Aggregate("jobs-2", "freeina"), res.Aggregate("jobs-2", "atp")
	t.Logf("FreeINA: avg JCT %.3f s, agg %.1f Gbps, ps_share %.3f; ATP: avg JCT %.3f s, agg %.1f Gbps",
		fa[MetricAvgJCT].Mean, fa[MetricAggGbps].Mean, fa[MetricPSShare].Mean, aa[MetricAvgJCT].Mean, aa[MetricAggGbps].Mean)
	if s := fa[MetricPSShare].Mean; s <= 0 || s >= 1 {
		t.Errorf("FreeINA's ps_share %v: want all-reduces on both paths", s)
	}
	if fa[MetricAggGbps].Mean <= 0 || aa[MetricAggGbps].Mean <= 0 {
		t.Error("no aggregation throughput")
	}
}

// TestFreeINAPacketOverflow runs the packet scenario of freeina-netns on
// sim with freeina_overflow: 2% of FreeINA's chunks overflow the switch's
// 32 bits. The run completes, every sum exact (the run fails otherwise),
// and its metrics count the all-reduces and chunks recovered on the PS
// path, which ps_share includes; the spec without it reports none.
func TestFreeINAPacketOverflow(t *testing.T) {
	spec := freeSpec(t, "freeina-netns", []string{"single"}, []string{"freeina"}, 4)
	clean := execute(t, spec, nil)
	spec = freeSpec(t, "freeina-netns", []string{"single"}, []string{"freeina"}, 4)
	var set func(n *yaml.Node)
	set = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for k := 0; k+1 < len(n.Content); k += 2 {
				if n.Content[k].Value == "job_list" {
					n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "freeina_overflow"}, &yaml.Node{Kind: yaml.ScalarNode, Value: "2%"})
					return
				}
			}
		}
		for _, c := range n.Content {
			set(c)
		}
	}
	for _, sc := range spec.Scenarios {
		set(sc.Node)
	}
	res := execute(t, spec, nil)
	c, o := clean.Runs[0].Metrics, res.Runs[0].Metrics
	t.Logf("clean: recovered %v (%v chunks), ps_share %.3f; with overflow: recovered %v (%v chunks), ps_share %.3f, avg JCT %.3f s against %.3f s",
		c[MetricRecovered], c[MetricRecoveredChunks], c[MetricPSShare], o[MetricRecovered], o[MetricRecoveredChunks], o[MetricPSShare], o[MetricAvgJCT], c[MetricAvgJCT])
	switch {
	case c[MetricRecovered] != 0 || c[MetricRecoveredChunks] != 0 || c[MetricGaveUp] != 0:
		t.Errorf("the clean run recovered %v all-reduces (%v chunks), %v connections gave up", c[MetricRecovered], c[MetricRecoveredChunks], c[MetricGaveUp])
	case o[MetricRecovered] < 1 || o[MetricRecoveredChunks] < o[MetricRecovered]:
		t.Errorf("with overflowing chunks: %v all-reduces recovered, %v chunks", o[MetricRecovered], o[MetricRecoveredChunks])
	case o[MetricPSShare] < o[MetricRecovered]/4 || o[MetricPSShare] <= c[MetricPSShare]:
		t.Errorf("ps_share %v (clean %v) with %v of 4 all-reduces recovered", o[MetricPSShare], c[MetricPSShare], o[MetricRecovered])
	case res.Runs[0].Params["freeina_overflow"] != 0.02:
		t.Errorf("params %v", res.Runs[0].Params)
	}
}

// sameRuns fails unless two executions gave every run the same metrics,
// series and tables.
func sameRuns(t *testing.T, a, b *analysis.Results) {
	t.Helper()
	if len(a.Runs) != len(b.Runs) {
		t.Fatalf("%d runs, then %d", len(a.Runs), len(b.Runs))
	}
	for i := range a.Runs {
		x, y := a.Runs[i], b.Runs[i]
		if x.Policy != y.Policy || x.Scenario != y.Scenario || !reflect.DeepEqual(x.Metrics, y.Metrics) ||
			!reflect.DeepEqual(x.Series, y.Series) || !reflect.DeepEqual(x.Tables, y.Tables) {
			t.Errorf("run %s/%s differs between two executions on sim", x.Scenario, x.Policy)
		}
	}
}

// BenchmarkFreeINASpec runs freeina-100g, every policy and scenario, with
// the parallel runner on GOMAXPROCS cores: its wall and CPU time in the
// default suite (which must stay under a minute on 2 cores with the other
// ready specs).
func BenchmarkFreeINASpec(b *testing.B) { benchSpecs(b, []string{"freeina-100g"}, "spec") }
