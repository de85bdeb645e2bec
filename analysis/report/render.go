package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/tracebed/tracebed/analysis"
)

// Image formats Render writes.
const (
	PNG = "png"
	SVG = "svg"
)

// Figure size and resolution: a one-column paper figure with the legend on
// the right, at a resolution that stays sharp on screen.
const (
	figWidth  = 6 * vg.Inch
	figHeight = 3.6 * vg.Inch
	pngDPI    = 150
)

// palette is the Okabe–Ito colour-blind-safe palette; dashes tell lines
// apart in greyscale print too.
var palette = []color.RGBA{
	{0x00, 0x72, 0xB2, 0xff}, // blue
	{0xD5, 0x5E, 0x00, 0xff}, // vermillion
	{0x00, 0x9E, 0x73, 0xff}, // bluish green
	{0xCC, 0x79, 0xA7, 0xff}, // reddish purple
	{0xE6, 0x9F, 0x00, 0xff}, // orange
	{0x56, 0xB4, 0xE9, 0xff}, // sky blue
	{0x00, 0x00, 0x00, 0xff}, // black
	{0xF0, 0xE4, 0x42, 0xff}, // yellow
}

var dashes = [][]vg.Length{
	nil,
	{vg.Points(6), vg.Points(3)},
	{vg.Points(2), vg.Points(2)},
	{vg.Points(6), vg.Points(2), vg.Points(2), vg.Points(2)},
}

var glyphs = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{},
	draw.PlusGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{},
}

func lineStyle(i int) draw.LineStyle {
	return draw.LineStyle{Color: palette[i%len(palette)], Width: vg.Points(1.5), Dashes: dashes[(i/len(palette)+i)%len(dashes)]}
}

func glyphStyle(i int) draw.GlyphStyle {
	return draw.GlyphStyle{Color: palette[i%len(palette)], Radius: vg.Points(2.5), Shape: glyphs[i%len(glyphs)]}
}

// Render draws f as a PNG or SVG image. The output depends only on f, so
// equal figures give byte-identical files.
func (f *Figure) Render(format string) ([]byte, error) {
	var canvas vg.CanvasWriterTo
	switch format {
	case PNG:
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(figWidth, figHeight), vgimg.UseDPI(pngDPI))}
	case SVG:
		canvas = vgsvg.New(figWidth, figHeight)
	default:
		return nil, fmt.Errorf("figure %s: format %q; want %s or %s", f.Name, format, PNG, SVG)
	}
	if err := f.draw(draw.New(canvas)); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if _, err := canvas.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("figure %s: %v", f.Name, err)
	}
	return b.Bytes(), nil
}

// draw lays the plot out on the left of dc and its legend on the right.
func (f *Figure) draw(dc draw.Canvas) error {
	p := plot.New()
	p.Title.Text = f.Title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = f.XLabel
	p.Y.Label.Text = f.YLabel
	grid := plotter.NewGrid()
	if f.Style == StyleBars {
		grid.Vertical.Color = nil
	}
	p.Add(grid)
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(10)
	legend.ThumbnailWidth = vg.Points(24)
	legend.Padding = vg.Points(2)

	for li, l := range f.Lines {
		if !analysis.Finite(l.Points) {
			return fmt.Errorf("figure %s: line %s has a value that is not a finite number", f.Name, l.Label)
		}
		xys := make(plotter.XYs, len(l.Points))
		for i, pt := range l.Points {
			xys[i] = plotter.XY{X: pt.X, Y: pt.Y}
		}
		var thumbs []plot.Thumbnailer
		switch f.Style {
		case StyleBars:
			// One bar chart per point, so a policy without a value in
			// some category leaves a gap rather than a zero bar.
			n := max(len(f.Categories), 1)
			width := (figWidth * 0.6) / vg.Length(n*(len(f.Lines)+1))
			offset := (vg.Length(li) - vg.Length(len(f.Lines)-1)/2) * width
			for _, pt := range l.Points {
				bc, err := plotter.NewBarChart(plotter.Values{pt.Y}, width)
				if err != nil {
					return fmt.Errorf("figure %s: %v", f.Name, err)
				}
				bc.XMin = pt.X
				bc.Offset = offset
				bc.Color = palette[l.Color%len(palette)]
				bc.LineStyle.Width = 0
				p.Add(bc)
				if len(thumbs) == 0 {
					thumbs = append(thumbs, bc)
				}
			}
		case StyleScatter:
			s, err := plotter.NewScatter(xys)
			if err != nil {
				return fmt.Errorf("figure %s: %v", f.Name, err)
			}
			s.GlyphStyle = glyphStyle(l.Color)
			p.Add(s)
			thumbs = append(thumbs, s)
		case StyleLinePoints:
			ln, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return fmt.Errorf("figure %s: %v", f.Name, err)
			}
			ln.LineStyle = lineStyle(l.Color)
			pts.GlyphStyle = glyphStyle(l.Color)
			p.Add(ln, pts)
			thumbs = append(thumbs, ln, pts)
			if len(l.Err) == len(l.Points) {
				yerr := make(plotter.YErrors, len(l.Err))
				for i, e := range l.Err {
					yerr[i] = struct{ Low, High float64 }{e, e}
				}
				eb, err := plotter.NewYErrorBars(struct {
					plotter.XYs
					plotter.YErrors
				}{xys, yerr})
				if err != nil {
					return fmt.Errorf("figure %s: %v", f.Name, err)
				}
				eb.LineStyle = lineStyle(l.Color)
				eb.LineStyle.Dashes = nil
				eb.LineStyle.Width = vg.Points(1)
				p.Add(eb)
			}
		default: // StyleLine, StyleStep
			ln, err := plotter.NewLine(xys)
			if err != nil {
				return fmt.Errorf("figure %s: %v", f.Name, err)
			}
			ln.LineStyle = lineStyle(l.Color)
			if f.Style == StyleStep {
				ln.StepStyle = plotter.PostStep
			}
			p.Add(ln)
			thumbs = append(thumbs, ln)
		}
		legend.Add(l.Label, thumbs...)
	}
	if f.Style == StyleStep && isFraction(f) {
		p.Y.Min, p.Y.Max = 0, 1
	}
	if f.YFrom0 && p.Y.Min > 0 {
		p.Y.Min = 0
	}
	padRange(&p.X.Min, &p.X.Max)
	padRange(&p.Y.Min, &p.Y.Max)
	p.X.Tick.Marker = tidyTicks{plot.DefaultTicks{}}
	p.Y.Tick.Marker = tidyTicks{plot.DefaultTicks{}}
	if f.Style == StyleBars {
		p.NominalX(f.Categories...)
		p.X.Min, p.X.Max = -0.5, float64(len(f.Categories))-0.5
		p.X.Padding = 0
	}
	if f.LogX && p.X.Min > 0 {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = tidyTicks{plot.LogTicks{Prec: -1}}
		if f.Style != StyleScatter {
			// Label the values swept, not only powers of ten.
			p.X.Tick.Marker = sweepTicks(f)
		}
	}

	// The legend's width: its widest entry plus the thumbnail and a margin.
	var lw vg.Length
	for _, l := range f.Lines {
		lw = max(lw, legend.TextStyle.Width(" "+l.Label))
	}
	lw += legend.ThumbnailWidth + vg.Points(12)
	lw = min(lw, dc.Max.X/3)
	plotArea := dc
	plotArea.Max.X -= lw
	legendArea := dc
	legendArea.Min.X = plotArea.Max.X + vg.Points(6)
	legendArea.Max.Y -= vg.Points(24) // below the title
	p.Draw(plotArea)
	legend.Draw(legendArea)
	return nil
}

// tidyTicks relabels the ticks of another Ticker compactly: no trailing
// zeros ("0.5", not "0.50"), and an exponent for very large or small values.
type tidyTicks struct{ plot.Ticker }

func (t tidyTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := t.Ticker.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = tickLabel(ticks[i].Value, ticks[i].Label)
		}
	}
	return ticks
}

func tickLabel(v float64, label string) string {
	if a := math.Abs(v); a >= 1e6 || (a > 0 && a < 1e-3) {
		s := strconv.FormatFloat(v, 'g', 3, 64)
		s = strings.Replace(s, "e+0", "e", 1)
		s = strings.Replace(s, "e-0", "e-", 1)
		return strings.Replace(s, "e+", "e", 1)
	}
	if strings.Contains(label, ".") && !strings.ContainsAny(label, "eE") {
		label = strings.TrimRight(strings.TrimRight(label, "0"), ".")
	}
	if label == "-0" {
		label = "0"
	}
	return label
}

// sweepTicks labels a logarithmic axis at the x values of f's points.
func sweepTicks(f *Figure) plot.Ticker {
	var xs []float64
	for _, l := range f.Lines {
		for _, p := range l.Points {
			xs = append(xs, p.X)
		}
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var ticks []plot.Tick
		for _, x := range xs {
			ticks = append(ticks, plot.Tick{Value: x, Label: tickLabel(x, strconv.FormatFloat(x, 'f', -1, 64))})
		}
		return ticks
	})
}

// isFraction reports whether every Y of f lies in [0, 1].
func isFraction(f *Figure) bool {
	for _, l := range f.Lines {
		for _, p := range l.Points {
			if p.Y < 0 || p.Y > 1 {
				return false
			}
		}
	}
	return true
}

// padRange widens a degenerate axis range (one value) so gonum/plot can
// draw it, and gives an empty one a default.
func padRange(lo, hi *float64) {
	if math.IsInf(*lo, 0) || math.IsInf(*hi, 0) {
		*lo, *hi = 0, 1
		return
	}
	if *lo == *hi {
		d := math.Abs(*lo) * 0.1
		if d == 0 {
			d = 1
		}
		*lo, *hi = *lo-d, *hi+d
	}
}

// FiguresFile is the name of the file that lists the figures of a results
// directory and holds their data.
const FiguresFile = "figures.json"

// FiguresIndex is the content of figures.json.
type FiguresIndex struct {
	Schema  string   `json:"schema"`
	Formats []string `json:"formats"`
	Figures []Figure `json:"figures"`
}

// WriteFigures renders figs as PNG and SVG into dir and writes figures.json
// (the figures' data). Images listed by a previous figures.json in dir that
// are no longer produced are removed, so dir holds exactly the figures of
// the latest run. It returns the names of the files written.
func WriteFigures(dir string, figs []Figure) ([]string, error) {
	old, _ := ReadFigures(dir)
	formats := []string{PNG, SVG}
	// Render in parallel; each image depends only on its figure.
	type job struct{ fig, format int }
	images := make([][]byte, len(figs)*len(formats))
	errs := make([]error, len(images))
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(images)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				i := j.fig*len(formats) + j.format
				images[i], errs[i] = figs[j.fig].Render(formats[j.format])
			}
		}()
	}
	for i := range figs {
		for k := range formats {
			jobs <- job{i, k}
		}
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var written []string
	keep := map[string]bool{}
	for i := range figs {
		for k, format := range formats {
			name := figs[i].Name + "." + format
			if err := os.WriteFile(filepath.Join(dir, name), images[i*len(formats)+k], 0o644); err != nil {
				return written, err
			}
			keep[name] = true
			written = append(written, name)
		}
	}
	if old != nil {
		for _, f := range old.Figures {
			for _, format := range old.Formats {
				name := f.Name + "." + format
				if !keep[name] && filepath.Base(name) == name {
					os.Remove(filepath.Join(dir, name))
				}
			}
		}
	}
	idx := FiguresIndex{Schema: analysis.FiguresSchema, Formats: formats, Figures: figs}
	if idx.Figures == nil {
		idx.Figures = []Figure{}
	}
	js, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return written, err
	}
	if err := os.WriteFile(filepath.Join(dir, FiguresFile), append(js, '\n'), 0o644); err != nil {
		return written, err
	}
	return append(written, FiguresFile), nil
}

// ReadFigures reads dir/figures.json.
func ReadFigures(dir string) (*FiguresIndex, error) {
	path := filepath.Join(dir, FiguresFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var idx FiguresIndex
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if idx.Schema != analysis.FiguresSchema {
		return nil, fmt.Errorf("%s: schema %q, want %q", path, idx.Schema, analysis.FiguresSchema)
	}
	if slices.ContainsFunc(idx.Formats, func(s string) bool { return s != PNG && s != SVG }) {
		return nil, errors.New(path + ": unknown image format")
	}
	return &idx, nil
}
