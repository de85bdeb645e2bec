package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tracebed/tracebed/analysis"
)

// Figure is a plot described by its data: the lines it draws, their labels
// and the axes. Figures are built from Results by Figures, rendered to PNG
// and SVG by Render, and stored as figures.json next to the images so the
// data behind every plot can be re-plotted elsewhere (pgfplots, matplotlib).
// The golden tests check Figures, not pixels.
type Figure struct {
	// Name is the file base name, unique within one results directory
	// (e.g. "jct_cdf-load-0.8").
	Name    string `json:"name"`
	Title   string `json:"title"`
	Caption string `json:"caption"` // one sentence saying what the figure shows
	XLabel  string `json:"x_label"` // with the unit in parentheses
	YLabel  string `json:"y_label"`
	Style   Style  `json:"style"`
	LogX    bool   `json:"log_x,omitempty"`       // logarithmic x axis (sweeps over geometric values)
	YFrom0  bool   `json:"y_from_zero,omitempty"` // y axis starts at zero (or below, for negative values)
	// Categories name the x positions 0, 1, … of a bar chart.
	Categories []string `json:"categories,omitempty"`
	Lines      []Line   `json:"lines"`
}

// Style says how a figure draws its lines.
type Style string

// Figure styles.
const (
	// StyleStep draws each line as a staircase that steps up at every
	// point (an empirical CDF).
	StyleStep Style = "step"
	// StyleLine joins the points of each line (a quantity over time).
	StyleLine Style = "line"
	// StyleLinePoints joins the points and marks each one, with error
	// bars of ±Err where given (a sweep over a parameter).
	StyleLinePoints Style = "linepoints"
	// StyleScatter marks each point without joining them (events).
	StyleScatter Style = "scatter"
	// StyleBars draws grouped bars: X is the index of a category, a bar
	// per line in each group.
	StyleBars Style = "bars"
)

// Line is one labelled line of a figure; Color is the index of its colour
// and dash pattern, fixed per policy so a policy looks the same in every
// figure of an experiment.
type Line struct {
	Label  string           `json:"label"`
	Color  int              `json:"color"`
	Points []analysis.Point `json:"points"`
	Err    []float64        `json:"err,omitempty"` // ± per point (sample std over seeds); nil when one seed
}

// MaxPoints bounds the points one line of a figure holds; longer series are
// thinned evenly (keeping the first and last point) so that SVG files stay
// small. figures.json holds the thinned data, as plotted.
const MaxPoints = 1000

// seriesDefault gives labels and a style to series recorded without a
// SeriesInfo and adds the style series kinds do not imply. The names are the
// conventions of the INA and far-memory experiments (docs/analysis.md).
var seriesDefaults = map[string]struct {
	info  analysis.SeriesInfo
	style Style
	what  string
}{
	"jct_cdf":           {analysis.SeriesInfo{Name: "jct_cdf", Kind: "cdf", XLabel: "job completion time (s)", YLabel: "fraction of jobs"}, StyleStep, "CDF of job completion time"},
	"mem_util":          {analysis.SeriesInfo{Name: "mem_util", Kind: "time", XLabel: "time (s)", YLabel: "switch aggregator memory in use (fraction)"}, StyleLine, "switch memory utilization over time"},
	"fault_latency_cdf": {analysis.SeriesInfo{Name: "fault_latency_cdf", Kind: "cdf", XLabel: "page fault latency (µs)", YLabel: "fraction of faults"}, StyleStep, "CDF of page fault latency"},
	"blocking":          {analysis.SeriesInfo{Name: "blocking", Kind: "time", XLabel: "time (s)", YLabel: "blocking duration (ms)"}, StyleScatter, "blocking events over time (one mark per event)"},
}

// tableScatters are the figures drawn from per-entity tables (a mark per
// entity): for each scenario where runs carry the table with both
// columns, one figure with the first seed's entities of each policy.
var tableScatters = []struct {
	table, x, y, name, xlabel, ylabel, what string
}{
	{"jobs", "bound_s", "slowdown", "job_slowdown", "isolated lower bound of the job (s)", "slowdown (JCT ÷ isolated lower bound)",
		"per-job slowdown (JCT ÷ the job's isolated lower bound) against that bound, a mark per job,"},
}

// ParamLabels are axis labels for scenario parameters (Run.Params keys);
// other keys are labelled with their name.
var paramLabels = map[string]string{
	"aggregators":        "switch memory (aggregators per switch)",
	"load":               "offered load",
	"local_memory_ratio": "local memory (fraction of working set)",
	"senders":            "senders",
}

// reductions are the "reduction relative to a baseline" figures drawn when
// the results hold the metric, the baseline policy and a sweep over the
// parameter.
var reductions = []struct {
	metric, baseline, param, name, ylabel, what string
}{
	{"avg_jct_s", "noina", "aggregators", "jct-reduction", "training time reduction vs. noina (%)", "training time reduction, 100 × (1 − avg_jct_s of the policy ÷ avg_jct_s of noina, host all-reduce),"},
}

// Figures returns every figure the results support, in a fixed order:
//
//   - for each series (SeriesInfo order, then other recorded series by
//     name) and each scenario: one figure with a line per policy. CDFs are
//     pooled over seeds (the equal-weight mixture of the seeds' CDFs);
//     other series show the first seed's run;
//   - for a "blocking" series, also the cumulative count of blocking
//     events over time;
//   - for a per-entity table with a scatter defined (the INA runs' jobs),
//     and each scenario: one figure with the first seed's entities of
//     each policy (per-job slowdown against the isolated lower bound);
//   - reductions relative to a baseline policy over a parameter sweep
//     (training time reduction vs. switch memory size for INA);
//   - for each scenario parameter (Run.Params key) that takes two or more
//     values, and each metric: the metric against the parameter, a line per
//     policy with ± the standard deviation over seeds, one figure per
//     combination of the other parameters;
//   - when no parameter varies (scenarios without Params), a grouped bar
//     chart per metric that has a direction: a group per scenario, a bar
//     per policy.
//
// The result depends only on r, so equal results give equal figures.
func Figures(r *analysis.Results) []Figure {
	figs := []Figure{}
	figs = append(figs, seriesFigures(r)...)
	figs = append(figs, tableFigures(r)...)
	figs = append(figs, reductionFigures(r)...)
	figs = append(figs, sweepFigures(r)...)
	if len(sweeps(r)) == 0 {
		figs = append(figs, barFigures(r)...)
	}
	// Names are unique: a clash (a series named like a sweep) gets a suffix.
	seen := map[string]bool{}
	for i := range figs {
		name := figs[i].Name
		for n := 2; seen[name]; n++ {
			name = fmt.Sprintf("%s-%d", figs[i].Name, n)
		}
		figs[i].Name = name
		seen[name] = true
	}
	return figs
}

// color returns the colour index of a policy: its position in the spec.
func policyColor(r *analysis.Results, policy string) int {
	if i := slices.Index(r.Policies, policy); i >= 0 {
		return i
	}
	return len(r.Policies)
}

// seriesInfos returns the described series then any other recorded series,
// with defaults filled in.
func seriesInfos(r *analysis.Results) []analysis.SeriesInfo {
	var infos []analysis.SeriesInfo
	seen := map[string]bool{}
	for _, si := range r.SeriesInfo {
		if !seen[si.Name] {
			infos = append(infos, si)
			seen[si.Name] = true
		}
	}
	var rest []string
	for _, run := range r.Runs {
		for name := range run.Series {
			if !seen[name] {
				seen[name] = true
				rest = append(rest, name)
			}
		}
	}
	slices.Sort(rest)
	for _, name := range rest {
		si := analysis.SeriesInfo{Name: name, Kind: "xy", XLabel: "x", YLabel: name}
		if d, ok := seriesDefaults[name]; ok {
			si = d.info
		}
		infos = append(infos, si)
	}
	for i, si := range infos {
		d, ok := seriesDefaults[si.Name]
		if !ok {
			continue
		}
		if si.XLabel == "" {
			infos[i].XLabel = d.info.XLabel
		}
		if si.YLabel == "" {
			infos[i].YLabel = d.info.YLabel
		}
		if si.Kind == "" {
			infos[i].Kind = d.info.Kind
		}
	}
	return infos
}

func seriesStyle(si analysis.SeriesInfo) Style {
	if d, ok := seriesDefaults[si.Name]; ok {
		return d.style
	}
	switch si.Kind {
	case "cdf":
		return StyleStep
	case "time":
		return StyleLine
	}
	return StyleLinePoints
}

func seriesWhat(si analysis.SeriesInfo) string {
	if d, ok := seriesDefaults[si.Name]; ok {
		return d.what
	}
	if si.Kind == "cdf" {
		return "CDF of " + si.XLabel
	}
	return si.YLabel + " against " + si.XLabel
}

func seriesFigures(r *analysis.Results) []Figure {
	var figs []Figure
	for _, si := range seriesInfos(r) {
		for _, sc := range r.Scenarios {
			f := Figure{
				Name:   fileName(si.Name + "-" + sc),
				Title:  fmt.Sprintf("%s: %s, scenario %s", r.Experiment, si.Name, sc),
				XLabel: si.XLabel, YLabel: si.YLabel, Style: seriesStyle(si),
			}
			var count Figure
			if si.Name == "blocking" {
				count = Figure{
					Name:   fileName("blocking_count-" + sc),
					Title:  fmt.Sprintf("%s: blocking events, scenario %s", r.Experiment, sc),
					XLabel: "time (s)", YLabel: "blocking events so far", Style: StyleStep,
				}
			}
			seeds := 0
			for _, p := range r.Policies {
				var per [][]analysis.Point
				for _, run := range r.Runs {
					if run.Scenario != sc || run.Policy != p {
						continue
					}
					if s, ok := run.Series[si.Name]; ok {
						per = append(per, s)
					}
				}
				if len(per) == 0 {
					continue
				}
				seeds = max(seeds, len(per))
				pts := per[0]
				if si.Kind == "cdf" && len(per) > 1 {
					pts = MixCDF(per)
				}
				f.Lines = append(f.Lines, Line{Label: p, Color: policyColor(r, p), Points: Thin(pts, MaxPoints)})
				if count.Name != "" {
					count.Lines = append(count.Lines, Line{Label: p, Color: policyColor(r, p), Points: Thin(cumulativeCount(per[0]), MaxPoints)})
				}
			}
			if len(f.Lines) == 0 {
				continue
			}
			f.Caption = captionFor(seriesWhat(si), sc, r, seeds, si.Kind == "cdf")
			f.YFrom0 = f.Style == StyleLine && nonNegative(f.Lines)
			figs = append(figs, f)
			if count.Name != "" {
				count.Caption = captionFor("cumulative number of blocking events", sc, r, 1, false)
				figs = append(figs, count)
			}
		}
	}
	return figs
}

func tableFigures(r *analysis.Results) []Figure {
	var figs []Figure
	for _, ts := range tableScatters {
		for _, sc := range r.Scenarios {
			f := Figure{
				Name:   fileName(ts.name + "-" + sc),
				Title:  fmt.Sprintf("%s: %s, scenario %s", r.Experiment, ts.name, sc),
				XLabel: ts.xlabel, YLabel: ts.ylabel, Style: StyleScatter,
			}
			seeds := 0
			for _, p := range r.Policies {
				var first *analysis.Run
				n := 0
				for i := range r.Runs {
					run := &r.Runs[i]
					if run.Scenario != sc || run.Policy != p || run.Table(ts.table) == nil {
						continue
					}
					n++
					if first == nil || run.Seed < first.Seed {
						first = run
					}
				}
				if first == nil {
					continue
				}
				seeds = max(seeds, n)
				var pts []analysis.Point
				for _, row := range first.Table(ts.table).Rows {
					x, okx := row.Values[ts.x]
					y, oky := row.Values[ts.y]
					if okx && oky {
						pts = append(pts, analysis.Point{X: x, Y: y})
					}
				}
				if len(pts) == 0 {
					continue
				}
				slices.SortStableFunc(pts, func(a, b analysis.Point) int { return cmp.Compare(a.X, b.X) })
				f.Lines = append(f.Lines, Line{Label: p, Color: policyColor(r, p), Points: Thin(pts, MaxPoints)})
			}
			if len(f.Lines) == 0 {
				continue
			}
			f.Caption = captionFor(ts.what, sc, r, seeds, false)
			f.LogX = geometric(f.Lines)
			figs = append(figs, f)
		}
	}
	return figs
}

func captionFor(what, sc string, r *analysis.Results, seeds int, pooled bool) string {
	s := fmt.Sprintf("%s per policy, scenario %s (%s)", upperFirst(what), sc, r.Substrate)
	switch {
	case seeds > 1 && pooled:
		s += fmt.Sprintf(", pooled over %d seeds", seeds)
	case seeds > 1 || len(r.Seeds) > 1:
		s += fmt.Sprintf(", seed %d", firstSeed(r))
	}
	return s + "."
}

func firstSeed(r *analysis.Results) int64 {
	if len(r.Runs) > 0 {
		s := r.Runs[0].Seed
		for _, run := range r.Runs {
			s = min(s, run.Seed)
		}
		return s
	}
	return r.Seed
}

// upperFirst capitalises the first letter of a sentence, unless its first
// word is an identifier (a metric name such as avg_jct_s).
func upperFirst(s string) string {
	word, _, _ := strings.Cut(s, " ")
	if s == "" || strings.ContainsAny(word, "_0123456789") {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// cumulativeCount turns events (X = start time) into the number of events
// started by each time.
func cumulativeCount(events []analysis.Point) []analysis.Point {
	xs := make([]float64, len(events))
	for i, e := range events {
		xs[i] = e.X
	}
	slices.Sort(xs)
	out := make([]analysis.Point, 0, len(xs)+1)
	out = append(out, analysis.Point{X: 0, Y: 0})
	for i, x := range xs {
		out = append(out, analysis.Point{X: x, Y: float64(i + 1)})
	}
	return out
}

// MixCDF returns the equal-weight mixture of empirical CDFs given as
// step points (X ascending, Y the cumulative fraction at X): at each X of
// any input, the mean over inputs of their value there. For inputs with
// equal sample counts it is the CDF of the pooled samples.
func MixCDF(cdfs [][]analysis.Point) []analysis.Point {
	var xs []float64
	for _, c := range cdfs {
		for _, p := range c {
			xs = append(xs, p.X)
		}
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	out := make([]analysis.Point, len(xs))
	idx := make([]int, len(cdfs)) // next point of each input not yet ≤ x
	for i, x := range xs {
		var sum float64
		for j, c := range cdfs {
			for idx[j] < len(c) && c[idx[j]].X <= x {
				idx[j]++
			}
			if idx[j] > 0 {
				sum += c[idx[j]-1].Y
			}
		}
		out[i] = analysis.Point{X: x, Y: sum / float64(len(cdfs))}
	}
	return out
}

// Thin returns at most n points of pts, evenly spaced by index, always
// keeping the first and the last.
func Thin(pts []analysis.Point, n int) []analysis.Point {
	if len(pts) <= n || n < 2 {
		return pts
	}
	out := make([]analysis.Point, 0, n)
	for i := range n - 1 {
		out = append(out, pts[i*(len(pts)-1)/(n-1)])
	}
	return append(out, pts[len(pts)-1])
}

// MaxSweepGroups bounds the figures of one sweep: when scenarios vary
// several parameters, a sweep over one of them is drawn for at most this
// many combinations of the others (the first in spec order), so that a
// large grid does not produce hundreds of files.
const MaxSweepGroups = 6

// sweepGroup is the scenarios of a sweep over one parameter that agree on
// every other parameter.
type sweepGroup struct {
	key    string   // the swept parameter
	fixed  string   // "other=value, …" for titles; "" when no other parameter varies
	suffix string   // file name suffix for fixed
	scens  []string // scenarios in spec order
}

// sweeps returns, for each parameter with two or more values across
// scenarios, the groups of scenarios that sweep it.
func sweeps(r *analysis.Results) []sweepGroup {
	params := scenarioParams(r)
	keys := map[string]map[float64]bool{}
	for _, ps := range params {
		for k, v := range ps {
			if keys[k] == nil {
				keys[k] = map[float64]bool{}
			}
			keys[k][v] = true
		}
	}
	var names []string
	for k, vs := range keys {
		if len(vs) >= 2 {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var groups []sweepGroup
	for _, key := range names {
		var order []string
		byFixed := map[string]*sweepGroup{}
		for _, sc := range r.Scenarios {
			ps, ok := params[sc]
			if !ok {
				continue
			}
			if _, ok := ps[key]; !ok {
				continue
			}
			var others []string
			for k := range ps {
				if k != key && len(keys[k]) >= 2 {
					others = append(others, k)
				}
			}
			slices.Sort(others)
			var fixed, suffix []string
			for _, k := range others {
				v := strconv.FormatFloat(ps[k], 'g', -1, 64)
				fixed = append(fixed, k+"="+v)
				suffix = append(suffix, k+"-"+v)
			}
			id := strings.Join(fixed, ", ")
			g := byFixed[id]
			if g == nil {
				g = &sweepGroup{key: key, fixed: id, suffix: strings.Join(suffix, "-")}
				byFixed[id] = g
				order = append(order, id)
			}
			g.scens = append(g.scens, sc)
		}
		kept := 0
		for _, id := range order {
			if kept == MaxSweepGroups {
				break
			}
			g := byFixed[id]
			xs := map[float64]bool{}
			for _, sc := range g.scens {
				xs[params[sc][key]] = true
			}
			if len(xs) >= 2 {
				groups = append(groups, *g)
				kept++
			}
		}
	}
	return groups
}

// scenarioParams returns each scenario's parameters (from its first run
// that records any).
func scenarioParams(r *analysis.Results) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, run := range r.Runs {
		if _, ok := out[run.Scenario]; !ok && len(run.Params) > 0 {
			out[run.Scenario] = run.Params
		}
	}
	return out
}

func paramLabel(key string) string {
	if l, ok := paramLabels[key]; ok {
		return l
	}
	return key
}

func metricLabel(m analysis.MetricInfo) string {
	if m.Unit != "" {
		return fmt.Sprintf("%s (%s)", m.Name, m.Unit)
	}
	return m.Name
}

func sweepFigures(r *analysis.Results) []Figure {
	params := scenarioParams(r)
	var figs []Figure
	for _, g := range sweeps(r) {
		for _, m := range r.Metrics {
			f := Figure{
				Name:   fileName(joinNonEmpty("-", m.Name, "vs", g.key, g.suffix)),
				Title:  joinNonEmpty(", ", fmt.Sprintf("%s: %s vs. %s", r.Experiment, m.Name, g.key), g.fixed),
				XLabel: paramLabel(g.key), YLabel: metricLabel(m), Style: StyleLinePoints,
			}
			var seeds int
			f.Lines, seeds = policyLines(r, m.Name, g.scens, func(_ int, sc string) float64 { return params[sc][g.key] })
			if len(f.Lines) == 0 {
				continue
			}
			f.Caption = sweepCaption(fmt.Sprintf("%s against %s", m.Name, paramLabel(g.key)), g, r, seeds, m.Description)
			f.LogX, f.YFrom0 = geometric(f.Lines), true
			figs = append(figs, f)
		}
	}
	return figs
}

// policyLines returns a line per policy through the scenarios scens: the
// mean of metric over seeds at x(i, scenario), with the standard deviation
// as error bars, sorted by x; and the largest number of seeds behind a
// point. Policies without the metric get no line.
func policyLines(r *analysis.Results, metric string, scens []string, x func(i int, sc string) float64) (lines []Line, seeds int) {
	for _, p := range r.Policies {
		l := Line{Label: p, Color: policyColor(r, p)}
		var errs []float64
		for i, sc := range scens {
			s, ok := r.Aggregate(sc, p)[metric]
			if !ok {
				continue
			}
			seeds = max(seeds, s.N)
			l.Points = append(l.Points, analysis.Point{X: x(i, sc), Y: s.Mean})
			errs = append(errs, s.Std)
		}
		if len(l.Points) == 0 {
			continue
		}
		sortLine(&l, errs)
		lines = append(lines, l)
	}
	return lines, seeds
}

// sortLine orders a line's points by X, carrying errs along; errs are kept
// only when one is non-zero.
func sortLine(l *Line, errs []float64) {
	idx := make([]int, len(l.Points))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(l.Points[a].X, l.Points[b].X) })
	pts := make([]analysis.Point, len(idx))
	es := make([]float64, len(idx))
	any := false
	for i, j := range idx {
		pts[i] = l.Points[j]
		es[i] = errs[j]
		any = any || errs[j] != 0
	}
	l.Points = pts
	if any {
		l.Err = es
	}
}

func sweepCaption(what string, g sweepGroup, r *analysis.Results, seeds int, desc string) string {
	s := upperFirst(what) + " per policy"
	if g.fixed != "" {
		s += " (" + g.fixed + ")"
	}
	if seeds > 1 {
		s += fmt.Sprintf("; mean ± standard deviation over %d seeds", seeds)
	}
	s += "."
	if desc != "" {
		s += " " + upperFirst(strings.TrimSuffix(desc, ".")) + "."
	}
	return s
}

func barFigures(r *analysis.Results) []Figure {
	var figs []Figure
	for _, m := range r.Metrics {
		if m.Better == analysis.Either {
			continue
		}
		f := Figure{
			Name: fileName(m.Name + "-by-scenario"), Title: fmt.Sprintf("%s: %s (%s is better)", r.Experiment, m.Name, m.Better),
			XLabel: "scenario", YLabel: metricLabel(m), Style: StyleBars, YFrom0: true, Categories: r.Scenarios,
		}
		var seeds int
		f.Lines, seeds = policyLines(r, m.Name, r.Scenarios, func(i int, _ string) float64 { return float64(i) })
		if len(f.Lines) == 0 {
			continue
		}
		f.Caption = m.Name + " per scenario and policy"
		if seeds > 1 {
			f.Caption += fmt.Sprintf(", mean over %d seeds", seeds)
		}
		f.Caption += "."
		if m.Description != "" {
			f.Caption += " " + upperFirst(strings.TrimSuffix(m.Description, ".")) + "."
		}
		figs = append(figs, f)
	}
	return figs
}

func reductionFigures(r *analysis.Results) []Figure {
	params := scenarioParams(r)
	var figs []Figure
	for _, red := range reductions {
		if !slices.Contains(r.Policies, red.baseline) || !slices.ContainsFunc(r.Metrics, func(m analysis.MetricInfo) bool { return m.Name == red.metric }) {
			continue
		}
		for _, g := range sweeps(r) {
			if g.key != red.param {
				continue
			}
			f := Figure{
				Name:   fileName(joinNonEmpty("-", red.name, "vs", g.key, g.suffix)),
				Title:  joinNonEmpty(", ", fmt.Sprintf("%s: %s vs. %s", r.Experiment, red.name, g.key), g.fixed),
				XLabel: paramLabel(g.key), YLabel: red.ylabel, Style: StyleLinePoints,
			}
			for _, p := range r.Policies {
				if p == red.baseline {
					continue
				}
				l := Line{Label: p, Color: policyColor(r, p)}
				var errs []float64
				for _, sc := range g.scens {
					base, ok1 := r.Aggregate(sc, red.baseline)[red.metric]
					v, ok2 := r.Aggregate(sc, p)[red.metric]
					if !ok1 || !ok2 || base.Mean == 0 {
						continue
					}
					l.Points = append(l.Points, analysis.Point{X: params[sc][g.key], Y: 100 * (1 - v.Mean/base.Mean)})
					errs = append(errs, 0)
				}
				if len(l.Points) == 0 {
					continue
				}
				sortLine(&l, errs)
				f.Lines = append(f.Lines, l)
			}
			if len(f.Lines) == 0 {
				continue
			}
			f.Caption = sweepCaption(red.what+" against "+paramLabel(g.key), g, r, 0, "")
			f.LogX, f.YFrom0 = geometric(f.Lines), true
			if len(r.Seeds) > 1 {
				f.Caption = strings.TrimSuffix(f.Caption, ".") + fmt.Sprintf("; from means over %d seeds.", len(r.Seeds))
			}
			figs = append(figs, f)
		}
	}
	return figs
}

func nonNegative(lines []Line) bool {
	for _, l := range lines {
		for _, p := range l.Points {
			if p.Y < 0 {
				return false
			}
		}
	}
	return true
}

// geometric reports whether the x values of lines are positive and span a
// factor of 8 or more, so that a logarithmic axis shows them evenly
// (memory sizes 1024, 4096, 16384).
func geometric(lines []Line) bool {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range lines {
		for _, p := range l.Points {
			lo, hi = min(lo, p.X), max(hi, p.X)
		}
	}
	return lo > 0 && hi/lo >= 8
}

func joinNonEmpty(sep string, parts ...string) string {
	var keep []string
	for _, p := range parts {
		if p != "" {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, sep)
}

// fileName makes s safe as a file base name: letters, digits, '.', '_'
// and '-' stay, anything else becomes '_'.
func fileName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}
