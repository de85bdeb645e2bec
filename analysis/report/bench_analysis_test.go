package report

import (
	"path/filepath"
	"testing"

	"github.com/tracebed/tracebed/analysis"
)

// BenchmarkFigures measures building the figures' data of the synthetic
// INA sweep (series, sweeps, reductions), per results file.
func BenchmarkFigures(b *testing.B) {
	r, err := analysis.Read(filepath.Join(sharedData, "ina.results.json"))
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for b.Loop() {
		n += len(Figures(r))
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "figures/s")
}

// BenchmarkRender measures drawing one CDF figure (four policies) as PNG
// and as SVG: what each figure of a run costs.
func BenchmarkRender(b *testing.B) {
	r, err := analysis.Read(filepath.Join(sharedData, "ina.results.json"))
	if err != nil {
		b.Fatal(err)
	}
	f := Figures(r)[0]
	for _, format := range []string{PNG, SVG} {
		b.Run(format, func(b *testing.B) {
			for b.Loop() {
				if _, err := f.Render(format); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
		})
	}
}

// BenchmarkCompare measures comparing two results files of 48 runs.
func BenchmarkCompare(b *testing.B) {
	r, err := analysis.Read(filepath.Join(sharedData, "ina.results.json"))
	if err != nil {
		b.Fatal(err)
	}
	base, next := ResultsDataset(r), ResultsDataset(r)
	values := 0
	for b.Loop() {
		c, err := Compare(base, next, CompareOptions{Tolerance: 0.05})
		if err != nil {
			b.Fatal(err)
		}
		values += len(c.Diffs)
	}
	b.ReportMetric(float64(values)/b.Elapsed().Seconds(), "values/s")
}
