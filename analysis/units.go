package analysis

import (
	"math"
	"strconv"
	"strings"
)

// Human units. results.json and every CSV keep exact numbers in each
// metric's own unit; tables for people (terminal, Markdown, the report)
// show a column, or a row of a comparison, in one unit chosen from its
// values ("3.646 TB" rather than 3646201963311.7 B) and say which in the
// header.

// scaleStep is one unit of a family: values in the family's base unit are
// divided by factor.
type scaleStep struct {
	name   string
	factor float64
}

// unitFamily is a metric unit's family: the unit's size in the base unit
// and the display units, smallest first.
type unitFamily struct {
	base  float64
	steps []scaleStep
}

var (
	timeSteps = []scaleStep{{"ns", 1e-9}, {"µs", 1e-6}, {"ms", 1e-3}, {"s", 1}}
	byteSteps = []scaleStep{{"B", 1}, {"kB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"PB", 1e15}}
	ibSteps   = []scaleStep{{"B", 1}, {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}}
	bitSteps  = []scaleStep{{"bps", 1}, {"kbps", 1e3}, {"Mbps", 1e6}, {"Gbps", 1e9}, {"Tbps", 1e12}}
)

// families maps the units metrics declare to their families.
var families = map[string]unitFamily{
	"s": {1, timeSteps}, "ms": {1e-3, timeSteps}, "us": {1e-6, timeSteps}, "µs": {1e-6, timeSteps}, "ns": {1e-9, timeSteps},
	"B": {1, byteSteps}, "bytes": {1, byteSteps}, "kB": {1e3, byteSteps}, "MB": {1e6, byteSteps}, "GB": {1e9, byteSteps},
	"KiB": {1 << 10, ibSteps}, "MiB": {1 << 20, ibSteps}, "GiB": {1 << 30, ibSteps},
	"bps": {1, bitSteps}, "kbps": {1e3, bitSteps}, "Mbps": {1e6, bitSteps}, "Gbps": {1e9, bitSteps},
}

// rateSteps are SI prefixes for counts per second ("ops/s").
var rateSteps = []scaleStep{{"", 1}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}

// Display is how a column or row of values of one metric is shown: in unit
// Unit, each value divided by Div.
type Display struct {
	Unit string // "" for plain counts and fractions
	Div  float64
}

// DisplayFor chooses how to show values of a metric in unit. Values whose
// largest magnitude lies in [1, 10,000) in the metric's own unit stay in it
// (its name usually says it: completion_us); others take the largest unit
// of the family in which the largest magnitude is at least 1, so 0.02 s
// shows as 20 ms and 3.6e12 B as 3.6 TB. Units without a family are shown
// as they are.
func DisplayFor(unit string, values ...float64) Display {
	var top float64
	for _, v := range values {
		if a := math.Abs(v); a > top && !math.IsInf(a, 0) {
			top = a
		}
	}
	if f, ok := families[unit]; ok {
		if top == 0 || top >= 1 && top < 1e4 {
			return Display{Unit: displayName(unit), Div: 1}
		}
		best := f.steps[0]
		for _, s := range f.steps {
			if top*f.base >= s.factor*(1-1e-12) {
				best = s
			}
		}
		return Display{Unit: best.name, Div: best.factor / f.base}
	}
	if per, ok := strings.CutSuffix(unit, "/s"); ok && per != "" && top >= 1e4 {
		best := rateSteps[0]
		for _, s := range rateSteps {
			if top >= s.factor {
				best = s
			}
		}
		if best.name == "" {
			return Display{Unit: unit, Div: 1}
		}
		return Display{Unit: best.name + " " + unit, Div: best.factor}
	}
	return Display{Unit: unit, Div: 1}
}

func displayName(unit string) string {
	if unit == "us" {
		return "µs"
	}
	return unit
}

// Format shows v in the display unit, without the unit: four significant
// digits for most values, whole numbers as such, large counts with
// thousands separators.
func (d Display) Format(v float64) string {
	if d.Div != 0 && d.Div != 1 {
		v /= d.Div
	}
	a := math.Abs(v)
	switch {
	case a >= 1e4 && a < 1e15:
		return groupThousands(math.Round(v))
	case v == math.Trunc(v) && a < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1 && a < 1e4:
		// Four significant digits: 72.50, 3.646, 812.3.
		decimals := 3 - int(math.Floor(math.Log10(a)))
		return strconv.FormatFloat(v, 'f', max(decimals, 0), 64)
	}
	return FormatValue(v)
}

// With shows v with its unit ("3.646 TB").
func (d Display) With(v float64) string {
	if d.Unit == "" {
		return d.Format(v)
	}
	return d.Format(v) + " " + d.Unit
}

// Header labels a column of metric name: "name (unit)", or the name alone
// when it has no unit or already ends with it ("avg_jct_s").
func (d Display) Header(name string) string {
	lower, unit := strings.ToLower(name), strings.ToLower(d.Unit)
	if d.Unit == "" || lower == unit || strings.HasSuffix(lower, "_"+unit) || (d.Unit == "µs" && strings.HasSuffix(lower, "_us")) {
		return name
	}
	return name + " (" + d.Unit + ")"
}

// groupThousands writes v with commas between groups of three digits and
// one decimal unless it is whole ("1,234,567", "12,345.6"); Format gives it
// whole numbers.
func groupThousands(v float64) string {
	s := strconv.FormatFloat(math.Abs(v), 'f', 1, 64)
	if strings.HasSuffix(s, ".0") {
		s = s[:len(s)-2]
	}
	whole, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	return b.String()
}
