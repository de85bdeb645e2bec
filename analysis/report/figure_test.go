package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tracebed/tracebed/analysis"
)

// TestFiguresGolden checks the data every figure plots (not its pixels)
// against testdata/figures-*.golden.json.
func TestFiguresGolden(t *testing.T) {
	for _, name := range []string{"ina", "farmem", "incast"} {
		t.Run(name, func(t *testing.T) {
			r, err := analysis.Read(filepath.Join(sharedData, name+".results.json"))
			if err != nil {
				t.Fatal(err)
			}
			figs := Figures(r)
			js, err := json.MarshalIndent(figs, "", " ")
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, "figures-"+name+".golden.json", append(js, '\n'))
		})
	}
}

// TestFiguresRequired: the figures the papers' comparisons need are there,
// with units on both axes and a line per policy.
func TestFiguresRequired(t *testing.T) {
	tests := []struct {
		file  string
		names []string
		lines int
	}{
		{"ina", []string{"jct_cdf-agg1024-load0.5", "mem_util-agg16384-load0.9", "jct-reduction-vs-aggregators-load-0.5", "jct-reduction-vs-aggregators-load-0.9", "avg_jct_s-vs-aggregators-load-0.9", "avg_jct_s-vs-load-aggregators-4096", "job_slowdown-agg1024-load0.5"}, 4},
		{"farmem", []string{"throughput_ops-vs-local_memory_ratio", "blocking-local-0.5", "blocking_count-local-0.5", "fault_latency_cdf-local-0.75"}, 4},
	}
	for _, tt := range tests {
		r, err := analysis.Read(filepath.Join(sharedData, tt.file+".results.json"))
		if err != nil {
			t.Fatal(err)
		}
		figs := Figures(r)
		byName := map[string]Figure{}
		for _, f := range figs {
			if _, dup := byName[f.Name]; dup {
				t.Errorf("%s: figure name %s used twice", tt.file, f.Name)
			}
			byName[f.Name] = f
			if f.XLabel == "" || f.YLabel == "" || f.Title == "" || f.Caption == "" {
				t.Errorf("%s: figure %s lacks a label, title or caption: %+v", tt.file, f.Name, f)
			}
		}
		for _, n := range tt.names {
			f, ok := byName[n]
			if !ok {
				var all []string
				for _, f := range figs {
					all = append(all, f.Name)
				}
				t.Errorf("%s: no figure %s; have %s", tt.file, n, strings.Join(all, ", "))
				continue
			}
			want := tt.lines
			if strings.HasPrefix(n, "jct-reduction") {
				want-- // the baseline has no line of its own
			}
			if len(f.Lines) != want {
				t.Errorf("%s: figure %s has %d lines, want %d", tt.file, n, len(f.Lines), want)
			}
			if !strings.Contains(f.XLabel+f.YLabel, "(") {
				t.Errorf("%s: figure %s axes %q / %q name no unit", tt.file, n, f.XLabel, f.YLabel)
			}
		}
	}
}

func TestReductionValues(t *testing.T) {
	r := &analysis.Results{
		Schema: analysis.Schema, Experiment: "x", Policies: []string{"dynaina", "noina"}, Scenarios: []string{"a", "b"}, Seeds: []int64{1},
		Metrics: []analysis.MetricInfo{{Name: "avg_jct_s", Better: analysis.Lower}},
		Runs: []analysis.Run{
			{Policy: "dynaina", Scenario: "a", Seed: 1, Metrics: map[string]float64{"avg_jct_s": 50}, Params: map[string]float64{"aggregators": 2048}},
			{Policy: "noina", Scenario: "a", Seed: 1, Metrics: map[string]float64{"avg_jct_s": 100}, Params: map[string]float64{"aggregators": 2048}},
			{Policy: "dynaina", Scenario: "b", Seed: 1, Metrics: map[string]float64{"avg_jct_s": 75}, Params: map[string]float64{"aggregators": 1024}},
			{Policy: "noina", Scenario: "b", Seed: 1, Metrics: map[string]float64{"avg_jct_s": 100}, Params: map[string]float64{"aggregators": 1024}},
		},
	}
	for _, f := range Figures(r) {
		if f.Name == "jct-reduction-vs-aggregators" {
			want := []analysis.Point{{X: 1024, Y: 25}, {X: 2048, Y: 50}}
			if len(f.Lines) != 1 || !slices.Equal(f.Lines[0].Points, want) {
				t.Fatalf("reduction lines %+v, want dynaina %v", f.Lines, want)
			}
			return
		}
	}
	t.Fatal("no jct-reduction-vs-aggregators figure")
}

func TestMixCDF(t *testing.T) {
	tests := []struct {
		name string
		in   [][]analysis.Point
		want []analysis.Point
	}{
		{"one", [][]analysis.Point{{{X: 1, Y: 0.5}, {X: 2, Y: 1}}}, []analysis.Point{{X: 1, Y: 0.5}, {X: 2, Y: 1}}},
		// Samples {1,3} and {2,4}: pooled {1,2,3,4}.
		{"two", [][]analysis.Point{{{X: 1, Y: 0.5}, {X: 3, Y: 1}}, {{X: 2, Y: 0.5}, {X: 4, Y: 1}}}, []analysis.Point{{X: 1, Y: 0.25}, {X: 2, Y: 0.5}, {X: 3, Y: 0.75}, {X: 4, Y: 1}}},
		{"shared x", [][]analysis.Point{{{X: 1, Y: 1}}, {{X: 1, Y: 0.5}, {X: 2, Y: 1}}}, []analysis.Point{{X: 1, Y: 0.75}, {X: 2, Y: 1}}},
	}
	for _, tt := range tests {
		if got := MixCDF(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("%s: MixCDF = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestThin(t *testing.T) {
	pts := make([]analysis.Point, 10)
	for i := range pts {
		pts[i] = analysis.Point{X: float64(i), Y: 0}
	}
	got := Thin(pts, 4)
	if len(got) != 4 || got[0].X != 0 || got[3].X != 9 {
		t.Errorf("Thin(10 points, 4) = %v", got)
	}
	if got := Thin(pts, 20); len(got) != 10 {
		t.Errorf("Thin kept %d of 10 points with room for 20", len(got))
	}
}

// TestRenderDeterministic: images depend only on the figure, so rendering
// twice gives the same bytes, in both formats.
func TestRenderDeterministic(t *testing.T) {
	r, err := analysis.Read(filepath.Join(sharedData, "farmem.results.json"))
	if err != nil {
		t.Fatal(err)
	}
	figs := Figures(r)
	for _, f := range []Figure{figs[0], figs[len(figs)-1]} {
		for _, format := range []string{PNG, SVG} {
			a, err := f.Render(format)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := f.Render(format)
			if !bytes.Equal(a, b) || len(a) < 1000 {
				t.Errorf("%s.%s: %d and %d bytes, equal %v", f.Name, format, len(a), len(b), bytes.Equal(a, b))
			}
		}
	}
	if _, err := figs[0].Render("gif"); err == nil {
		t.Error("Render(gif) succeeded")
	}
}

func TestWriteFigures(t *testing.T) {
	dir := t.TempDir()
	figs := []Figure{
		{Name: "a", Title: "a", XLabel: "x (s)", YLabel: "y", Style: StyleLine, Lines: []Line{{Label: "p", Points: []analysis.Point{{X: 0, Y: 1}, {X: 1, Y: 2}}}}},
		{Name: "b", Title: "b", XLabel: "x (s)", YLabel: "y", Style: StyleScatter, Lines: []Line{{Label: "p", Points: []analysis.Point{{X: 0, Y: 1}}}}},
	}
	if _, err := WriteFigures(dir, figs); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.png", "a.svg", "b.png", "b.svg", FiguresFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// A rerun that no longer draws b removes its images.
	if _, err := WriteFigures(dir, figs[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.png")); err == nil {
		t.Error("b.png left behind")
	}
	idx, err := ReadFigures(dir)
	if err != nil || len(idx.Figures) != 1 {
		t.Fatalf("ReadFigures: %v, %+v", err, idx)
	}
	// Empty figures and non-finite values.
	bad := Figure{Name: "nan", Lines: []Line{{Label: "p", Points: []analysis.Point{{X: 0, Y: nan()}}}}}
	if _, err := bad.Render(PNG); err == nil || !strings.Contains(err.Error(), "finite") {
		t.Errorf("NaN point: %v", err)
	}
	empty := Figure{Name: "empty", Title: "empty", Style: StyleLine}
	if _, err := empty.Render(SVG); err != nil {
		t.Errorf("empty figure: %v", err)
	}
}

func nan() float64 { return math.NaN() }

// TestSweepGroupsBounded: a grid of 4 × 10 scenarios draws each metric
// against the first parameter for at most MaxSweepGroups values of the
// second.
func TestSweepGroupsBounded(t *testing.T) {
	r := &analysis.Results{Schema: analysis.Schema, Experiment: "grid", Policies: []string{"p"}, Seeds: []int64{1},
		Metrics: []analysis.MetricInfo{{Name: "m", Better: analysis.Lower}}}
	for a := range 4 {
		for b := range 10 {
			sc := fmt.Sprintf("a%d-b%d", a, b)
			r.Scenarios = append(r.Scenarios, sc)
			r.Runs = append(r.Runs, analysis.Run{Policy: "p", Scenario: sc, Seed: 1, Metrics: map[string]float64{"m": float64(a + b)},
				Params: map[string]float64{"a": float64(a), "b": float64(b)}})
		}
	}
	n := map[string]int{}
	for _, f := range Figures(r) {
		key, _, _ := strings.Cut(strings.TrimPrefix(f.Name, "m-vs-"), "-")
		n[key]++
	}
	if n["a"] != MaxSweepGroups || n["b"] != 4 {
		t.Errorf("figures per swept parameter: %v", n)
	}
}
