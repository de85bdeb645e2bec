package report

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/tracebed/tracebed/analysis"
)

// Dataset is what Compare compares: values by (group, item, metric), where
// a group and an item are a scenario and a policy for results, a package
// and a benchmark for bench files.
type Dataset struct {
	Kind      string // "results" or "bench"
	Name      string // the experiment, or "bench"
	GroupName string // "scenario" or "package"
	ItemName  string // "policy" or "benchmark"
	Metrics   []analysis.MetricInfo
	Rows      []DataRow
	// Identity is what should match for a comparison to be meaningful
	// (spec hash, seeds, substrate, machine); Compare notes differences.
	Identity map[string]string
}

// DataRow holds one item's metrics.
type DataRow struct {
	Group, Item string
	Values      map[string]analysis.Summary
}

// ResultsDataset returns r as comparable values: the mean of every
// metric over seeds, per scenario and policy.
func ResultsDataset(r *analysis.Results) Dataset {
	d := Dataset{
		Kind: "results", Name: r.Experiment, GroupName: "scenario", ItemName: "policy", Metrics: r.Metrics,
		Identity: map[string]string{
			"spec_hash": r.SpecHash, "seeds": fmt.Sprint(r.Seeds), "substrate": r.Substrate,
			"scale": strconv.FormatFloat(r.Scale, 'g', -1, 64),
		},
	}
	for _, sc := range r.Scenarios {
		for _, p := range r.Policies {
			if agg := r.Aggregate(sc, p); len(agg) > 0 {
				d.Rows = append(d.Rows, DataRow{Group: sc, Item: p, Values: agg})
			}
		}
	}
	return d
}

// Dataset returns the benchmarks and suite times as comparable values.
// Every unit seen is a metric, with its direction from UnitBetter.
func (b *Bench) Dataset() Dataset {
	d := Dataset{
		Kind: "bench", Name: "bench", GroupName: "package", ItemName: "benchmark",
		Identity: map[string]string{"machine": b.Machine.String(), "benchtime": b.Benchtime},
	}
	units := map[string]bool{}
	for _, bm := range b.Benchmarks {
		row := DataRow{Group: bm.Package, Item: bm.Name, Values: map[string]analysis.Summary{}}
		for u, v := range bm.Metrics {
			row.Values[u] = analysis.Summary{Mean: v, N: bm.Runs}
			units[u] = true
		}
		d.Rows = append(d.Rows, row)
	}
	for _, u := range sortedKeys(units) {
		d.Metrics = append(d.Metrics, analysis.MetricInfo{Name: u, Better: UnitBetter(u)})
	}
	if len(b.Suites) > 0 {
		d.Metrics = append(d.Metrics,
			analysis.MetricInfo{Name: "wall_s", Unit: "s", Better: analysis.Lower, Description: "wall-clock time of the experiment"},
			analysis.MetricInfo{Name: "runs_per_s", Unit: "runs/s", Better: analysis.Higher})
		for _, s := range b.Suites {
			d.Rows = append(d.Rows, DataRow{Group: "suite", Item: s.Experiment, Values: map[string]analysis.Summary{
				"wall_s": {Mean: s.WallS, N: 1}, "runs_per_s": {Mean: s.RunsPerS, N: 1},
			}})
		}
	}
	return d
}

// ReadDataset reads a results file (or directory) or a bench.json,
// whichever path holds, rejecting anything else with a message that says
// what it is and what would be accepted.
func ReadDataset(path string) (Dataset, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		r, err := analysis.Read(path)
		if err != nil {
			return Dataset{}, err
		}
		if err := r.Complete(path); err != nil {
			return Dataset{}, err
		}
		return ResultsDataset(r), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Dataset{}, err
	}
	return ParseDataset(path, data)
}

// ParseDataset decodes a results or bench file's content; name prefixes
// every error.
func ParseDataset(name string, data []byte) (Dataset, error) {
	path := name
	schema, version, err := analysis.ProbeSchema(path, data)
	if err != nil {
		return Dataset{}, err
	}
	switch schema {
	case analysis.Schema:
		r, err := analysis.Parse(path, data)
		if err != nil {
			return Dataset{}, err
		}
		if err := r.Complete(path); err != nil {
			return Dataset{}, err
		}
		return ResultsDataset(r), nil
	case analysis.BenchSchema:
		b, err := ParseBench(path, data)
		if err != nil {
			return Dataset{}, err
		}
		return b.Dataset(), nil
	}
	why := analysis.SchemaMismatch(schema, version, analysis.Schema, "results")
	if strings.HasPrefix(schema, "tracebed.bench/") {
		why = analysis.SchemaMismatch(schema, version, analysis.BenchSchema, "benchmark")
	}
	return Dataset{}, fmt.Errorf("%s: %s; tracebed compare reads results.json (%s) and bench.json (%s)", path, why, analysis.Schema, analysis.BenchSchema)
}

// CompareOptions tune Compare.
type CompareOptions struct {
	// Tolerance is the relative change (0.05 for 5%) a metric may move
	// the wrong way before it counts as a regression.
	Tolerance float64
	// PerMetric overrides Tolerance for some metrics.
	PerMetric map[string]float64
	// Metrics restricts the comparison to these metrics (all if empty).
	Metrics []string
}

// Status of one compared value.
const (
	Same       = "same"
	Improved   = "improved"
	Worse      = "worse" // the wrong way, within tolerance
	Regression = "REGRESSION"
	Changed    = "changed" // a metric without a direction
	Missing    = "missing" // in the baseline only
	Added      = "new"     // in the new file only
)

// Diff is one (group, item, metric) of a comparison.
type Diff struct {
	Group, Item, Metric string
	Unit                string
	Better              analysis.Better
	Old, New            analysis.Summary
	HasOld, HasNew      bool
	// Change is (new − old) / |old|; ±Inf when old is 0 and new is not.
	Change    float64
	Tolerance float64
	Status    string
}

// Comparison is the outcome of Compare.
type Comparison struct {
	Base, New Dataset
	Diffs     []Diff   // every compared value, in the baseline's order, then new ones
	Notes     []string // differences in identity (spec, seeds, machine)
}

// Regressions returns the diffs that moved the wrong way beyond tolerance.
func (c *Comparison) Regressions() []Diff {
	var out []Diff
	for _, d := range c.Diffs {
		if d.Status == Regression {
			out = append(out, d)
		}
	}
	return out
}

// Counts returns how many diffs have each status.
func (c *Comparison) Counts() map[string]int {
	n := map[string]int{}
	for _, d := range c.Diffs {
		n[d.Status]++
	}
	return n
}

// ErrNothingInCommon is returned when two datasets share no value.
var ErrNothingInCommon = errors.New("the files have no (group, item, metric) in common")

// Compare compares new against base. A metric with a direction regresses
// when it moves the wrong way by more than its tolerance, relative to the
// baseline; from a baseline of 0, any move the wrong way regresses.
// Metrics without a direction are reported as changed, never as
// regressions. Unknown names in opts.Metrics are an error.
func Compare(base, new Dataset, opts CompareOptions) (*Comparison, error) {
	if opts.Tolerance < 0 || math.IsNaN(opts.Tolerance) {
		return nil, fmt.Errorf("tolerance %v: want 0 or more", opts.Tolerance)
	}
	if base.Kind != new.Kind {
		return nil, fmt.Errorf("cannot compare a %s file with a %s file", base.Kind, new.Kind)
	}
	info := map[string]analysis.MetricInfo{}
	var names []string
	for _, d := range []Dataset{base, new} {
		for _, m := range d.Metrics {
			if _, ok := info[m.Name]; !ok {
				info[m.Name] = m
				names = append(names, m.Name)
			}
		}
	}
	for name := range opts.PerMetric {
		if _, ok := info[name]; !ok {
			return nil, fmt.Errorf("tolerance for metric %q: no such metric; the files have %s", name, strings.Join(names, ", "))
		}
	}
	if len(opts.Metrics) > 0 {
		for _, m := range opts.Metrics {
			if _, ok := info[m]; !ok {
				return nil, fmt.Errorf("metric %q: no such metric; the files have %s", m, strings.Join(names, ", "))
			}
		}
		names = slices.DeleteFunc(names, func(n string) bool { return !slices.Contains(opts.Metrics, n) })
	}
	c := &Comparison{Base: base, New: new}
	if base.Name != new.Name {
		c.Notes = append(c.Notes, fmt.Sprintf("comparing %s %q with %q", base.Kind, base.Name, new.Name))
	}
	for _, k := range sortedKeys(base.Identity) {
		if v, ok := new.Identity[k]; ok && v != base.Identity[k] {
			c.Notes = append(c.Notes, fmt.Sprintf("%s differs: %s in the baseline, %s in the new file", k, base.Identity[k], v))
		}
	}
	type key struct{ g, i string }
	newRows := map[key]DataRow{}
	for _, r := range new.Rows {
		newRows[key{r.Group, r.Item}] = r
	}
	seen := map[key]bool{}
	common := 0
	for _, br := range base.Rows {
		k := key{br.Group, br.Item}
		seen[k] = true
		nr, inNew := newRows[k]
		for _, m := range names {
			ov, hasOld := br.Values[m]
			var nv analysis.Summary
			hasNew := false
			if inNew {
				nv, hasNew = nr.Values[m]
			}
			if !hasOld && !hasNew {
				continue
			}
			d := diff(info[m], br.Group, br.Item, ov, nv, hasOld, hasNew, tolerance(opts, m))
			if hasOld && hasNew {
				common++
			}
			c.Diffs = append(c.Diffs, d)
		}
	}
	for _, nr := range new.Rows {
		if seen[key{nr.Group, nr.Item}] {
			continue
		}
		for _, m := range names {
			if nv, ok := nr.Values[m]; ok {
				c.Diffs = append(c.Diffs, diff(info[m], nr.Group, nr.Item, analysis.Summary{}, nv, false, true, tolerance(opts, m)))
			}
		}
	}
	if common == 0 && (len(base.Rows) > 0 || len(new.Rows) > 0) {
		return c, ErrNothingInCommon
	}
	return c, nil
}

func tolerance(opts CompareOptions, metric string) float64 {
	if t, ok := opts.PerMetric[metric]; ok {
		return t
	}
	return opts.Tolerance
}

func diff(m analysis.MetricInfo, group, item string, ov, nv analysis.Summary, hasOld, hasNew bool, tol float64) Diff {
	d := Diff{Group: group, Item: item, Metric: m.Name, Unit: m.Unit, Better: m.Better, Old: ov, New: nv, HasOld: hasOld, HasNew: hasNew, Tolerance: tol}
	switch {
	case !hasNew:
		d.Status = Missing
		return d
	case !hasOld:
		d.Status = Added
		return d
	}
	delta := nv.Mean - ov.Mean
	switch {
	case delta == 0:
		d.Change = 0
	case ov.Mean == 0:
		d.Change = math.Inf(int(math.Copysign(1, delta)))
	default:
		d.Change = delta / math.Abs(ov.Mean)
	}
	if delta == 0 {
		d.Status = Same
		return d
	}
	var wrong bool
	switch m.Better {
	case analysis.Lower:
		wrong = delta > 0
	case analysis.Higher:
		wrong = delta < 0
	default:
		d.Status = Changed
		return d
	}
	switch {
	case !wrong:
		d.Status = Improved
	case math.Abs(d.Change) > tol:
		d.Status = Regression
	default:
		d.Status = Worse
	}
	return d
}

// FormatChange prints a relative change as a signed percentage.
func FormatChange(c float64) string {
	switch {
	case math.IsInf(c, 1):
		return "+∞ (was 0)"
	case math.IsInf(c, -1):
		return "−∞ (was 0)"
	case c == 0:
		return "0%"
	}
	return fmt.Sprintf("%+.1f%%", 100*c)
}

// Describe says in words what a regression is, for error messages:
// "throughput_ops of glitter in scenario local-0.5 fell 12.0% (higher is
// better; tolerance 5%)".
func (d Diff) Describe(groupName, itemName string) string {
	verb := "rose"
	if d.New.Mean < d.Old.Mean {
		verb = "fell"
	}
	change := strings.TrimPrefix(strings.TrimPrefix(FormatChange(d.Change), "+"), "-")
	if math.IsInf(d.Change, 0) {
		change = "from 0"
	}
	return fmt.Sprintf("%s of %s %s in %s %s %s %s: %s → %s (%s is better; tolerance %s)",
		d.Metric, itemName, d.Item, groupName, d.Group, verb, change,
		analysis.DisplayFor(d.Unit, d.Old.Mean, d.New.Mean).With(d.Old.Mean), analysis.DisplayFor(d.Unit, d.Old.Mean, d.New.Mean).With(d.New.Mean), d.Better, formatTolerance(d.Tolerance))
}

func formatTolerance(t float64) string {
	return strconv.FormatFloat(100*t, 'g', 4, 64) + "%"
}

// Table renders the comparison. Unless all is set, values that did not
// change are left out (and counted in a note).
func (c *Comparison) Table(all bool) analysis.Table {
	t := analysis.Table{
		Title:  fmt.Sprintf("%s: baseline vs. new", c.Base.Name),
		Header: []string{c.Base.GroupName, c.Base.ItemName, "metric", "better", "baseline", "new", "change", "status"},
		// The CSV form: exact values in the metric's own unit.
		CSVHeader: []string{c.Base.GroupName, c.Base.ItemName, "metric", "unit", "better", "baseline", "new", "change", "status"},
	}
	if c.Base.Name != c.New.Name {
		t.Title = fmt.Sprintf("%s (baseline) vs. %s (new)", c.Base.Name, c.New.Name)
	}
	rows := slices.Clone(c.Diffs)
	// Regressions first, then the rest in file order.
	slices.SortStableFunc(rows, func(a, b Diff) int {
		return cmp.Compare(statusRank(a.Status), statusRank(b.Status))
	})
	hidden := 0
	for _, d := range rows {
		if !all && d.Status == Same {
			hidden++
			continue
		}
		old, new, change := "–", "–", "–"
		exactOld, exactNew := "", ""
		disp := analysis.DisplayFor(d.Unit, d.Old.Mean, d.New.Mean)
		if d.HasOld {
			old, exactOld = formatSummary(disp, d.Old), analysis.ExactNumber(d.Old.Mean)
		}
		if d.HasNew {
			new, exactNew = formatSummary(disp, d.New), analysis.ExactNumber(d.New.Mean)
		}
		if d.HasOld && d.HasNew {
			change = FormatChange(d.Change)
		}
		better := string(d.Better)
		if better == "" {
			better = "–"
		}
		t.Rows = append(t.Rows, []string{d.Group, d.Item, d.Metric, better, old, new, change, d.Status})
		t.CSVRows = append(t.CSVRows, []string{d.Group, d.Item, d.Metric, d.Unit, better, exactOld, exactNew, change, d.Status})
	}
	n := c.Counts()
	var parts []string
	for _, s := range []string{Regression, Worse, Improved, Changed, Same, Missing, Added} {
		if n[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[s], strings.ToLower(s)))
		}
	}
	t.Notes = append(t.Notes, fmt.Sprintf("%d values compared: %s.", len(c.Diffs), strings.Join(parts, ", ")))
	if hidden > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d unchanged values not shown (--all shows them).", hidden))
	}
	t.Notes = append(t.Notes, c.Notes...)
	return t
}

func statusRank(s string) int {
	switch s {
	case Regression:
		return 0
	case Missing:
		return 1
	}
	return 2
}

// formatSummary shows a mean (± its standard deviation) with its unit.
func formatSummary(d analysis.Display, s analysis.Summary) string {
	if s.N > 1 && s.Std > 0 {
		return d.Format(s.Mean) + " ± " + d.With(s.Std)
	}
	return d.With(s.Mean)
}

// ParseTolerance reads a tolerance: "5%" or a fraction "0.05".
func ParseTolerance(s string) (float64, error) {
	v := strings.TrimSpace(s)
	pct := strings.HasSuffix(v, "%")
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("tolerance %q: want a percentage such as 5%% or a fraction such as 0.05", s)
	}
	if pct {
		f /= 100
	}
	return f, nil
}
