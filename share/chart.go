package share

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// The unfurl picture's size: 1200×630 px is the 1.91:1 image chat apps
// (Slack, Teams) and OpenGraph readers show full width without cropping.
const (
	ChartWidthPx  = 1200
	ChartHeightPx = 630
	chartDPI      = 96
)

// chartPart is one line of the picture, coloured as the pages colour it
// (web/static/app.css --c-*), dashed where lines may lie on each other.
type chartPart struct {
	name  string
	label string
	color color.RGBA
	dash  []vg.Length
}

// The picture draws TTFT p95 with the p95 of each part of it: a line that
// grows beside TTFT names the cause in a glance, where a stack of p95s
// would be dominated by its largest part. Decode is left out: it is not
// part of TTFT and its seconds would flatten the rest.
var chartParts = []chartPart{
	{diagnose.ComponentQueue, "queue p95", color.RGBA{0xd5, 0x5e, 0x00, 0xff}, nil},
	{diagnose.ComponentPrefill, "prefill p95", color.RGBA{0x00, 0x72, 0xb2, 0xff}, []vg.Length{vg.Points(8), vg.Points(4)}},
	{diagnose.ComponentNetwork, "network p95", color.RGBA{0xcc, 0x79, 0xa7, 0xff}, []vg.Length{vg.Points(2), vg.Points(3)}},
	{diagnose.ComponentPreInference, "pre-inference p95", color.RGBA{0x99, 0x99, 0x99, 0xff}, []vg.Length{vg.Points(10), vg.Points(3), vg.Points(2), vg.Points(3)}},
}

var (
	chartInk   = color.RGBA{0x22, 0x22, 0x22, 0xff}
	chartGrid  = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	chartEvent = color.RGBA{0xe6, 0x9f, 0x00, 0xff}
	chartAfter = color.RGBA{0xd5, 0x5e, 0x00, 0xff}
	chartPrior = color.RGBA{0x99, 0x99, 0x99, 0xff}
)

// ChartPNG draws the snapshot's picture for chat unfurls, ChartWidthPx ×
// ChartHeightPx: a diagnosis's TTFT p95 and its parts over the window, or a
// comparison's p95s before and after. It returns nil for a snapshot with
// nothing to draw (a trace, or a window without requests).
func (s Snapshot) ChartPNG() ([]byte, error) {
	var p *plot.Plot
	var err error
	switch {
	case s.Diagnose != nil:
		p, err = diagnoseChart(s.Diagnose)
	case s.Compare != nil:
		p, err = compareChart(s.Compare)
	}
	if err != nil || p == nil {
		return nil, err
	}
	c := vgimg.PngCanvas{Canvas: vgimg.NewWith(
		vgimg.UseWH(vg.Length(ChartWidthPx)*vg.Inch/chartDPI, vg.Length(ChartHeightPx)*vg.Inch/chartDPI),
		vgimg.UseDPI(chartDPI), vgimg.UseBackgroundColor(color.White))}
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("encode chart png: %w", err)
	}
	return buf.Bytes(), nil
}

// newChart is a plot with the pages' type sizes, legible when a chat app
// shrinks the picture to ~400 px wide.
func newChart(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = 22
	p.Title.TextStyle.Color = chartInk
	p.Title.Padding = vg.Points(8)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = 16
		a.Tick.Label.Font.Size = 15
		a.Color, a.Tick.Color, a.Label.TextStyle.Color, a.Tick.Label.Color = chartInk, chartInk, chartInk, chartInk
	}
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = 15
	p.Legend.Padding = vg.Points(3)
	p.Legend.XOffs = -vg.Points(12)
	p.Add(&plotter.Grid{Horizontal: draw.LineStyle{Color: chartGrid, Width: vg.Points(0.7)}})
	return p
}

// legendRoom lifts the top of the value axis so the legend, drawn inside
// the plot's top right, sits above the highest line instead of on it.
const legendRoom = 1.35

// msScale picks seconds for figures of a second or more, as the pages
// print them, so ticks read "2 s", not "2000 ms".
func msScale(maxMs float64) (div float64, unit string) {
	if maxMs >= 1000 {
		return 1000, "s"
	}
	return 1, "ms"
}

// roundTicks labels a value axis at 1, 2 or 5 × 10^n in its unit, with no
// trailing zeros ("0.5 s", "2 s").
type roundTicks struct{ unit string }

func (r roundTicks) Ticks(lo, hi float64) []plot.Tick {
	step := niceStep((hi - lo) / 6)
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf("%g %s", roundTo(v, step), r.unit)})
	}
	return ticks
}

// niceStep is the 1, 2 or 5 × 10^n at or above raw.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag*(1+1e-9) {
			return m * mag
		}
	}
	return 10 * mag
}

// roundTo removes float noise from a multiple of step (0.30000000000000004).
func roundTo(v, step float64) float64 {
	digits := math.Max(0, -math.Floor(math.Log10(step)))
	f := math.Pow(10, digits)
	return math.Round(v*f) / f
}

// clockTicks labels the time axis in UTC clock times, as the pages do.
type clockTicks struct{}

func (c clockTicks) Ticks(lo, hi float64) []plot.Tick {
	steps := []float64{60, 120, 300, 600, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if (hi-lo)/s <= 7 {
			step = s
			break
		}
	}
	layout := "15:04"
	if step >= 86400 {
		layout = "2 Jan"
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: time.Unix(int64(v), 0).UTC().Format(layout)})
	}
	return ticks
}

func diagnoseChart(d *DiagnoseData) (*plot.Plot, error) {
	series := d.Diagnosis.Series
	maxMs := 0.0
	for _, b := range series {
		if b.Requests == 0 {
			continue
		}
		maxMs = math.Max(maxMs, valueOr(b.TTFT.P95))
		for _, part := range chartParts {
			maxMs = math.Max(maxMs, b.P95[part.name])
		}
	}
	if maxMs <= 0 {
		return nil, nil
	}
	div, unit := msScale(maxMs)
	who := d.Params.Service
	if who == "" {
		who = "all services"
	}
	p := newChart(who + ": TTFT p95 and its parts")
	p.X.Label.Text = "UTC"
	p.X.Tick.Marker = clockTicks{}
	p.Y.Tick.Marker = roundTicks{unit: unit}
	p.Y.Min = 0

	half := d.Diagnosis.BucketSeconds / 2
	line := func(get func(b diagnose.Bucket) (float64, bool)) plotter.XYs {
		var pts plotter.XYs
		for _, b := range series {
			if v, ok := get(b); ok && b.Requests > 0 {
				pts = append(pts, plotter.XY{X: float64(b.Start.Unix()) + half, Y: v / div})
			}
		}
		return pts
	}
	for _, part := range chartParts {
		pts := line(func(b diagnose.Bucket) (float64, bool) { v, ok := b.P95[part.name]; return v, ok })
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", part.name, err)
		}
		l.Color, l.Width, l.Dashes = part.color, vg.Points(2.5), part.dash
		p.Add(l)
		p.Legend.Add(part.label, l)
	}
	ttft := line(func(b diagnose.Bucket) (float64, bool) { return valueOr(b.TTFT.P95), b.TTFT.P95 != nil })
	if len(ttft) > 0 {
		l, err := plotter.NewLine(ttft)
		if err != nil {
			return nil, fmt.Errorf("chart ttft: %w", err)
		}
		l.Color, l.Width = chartInk, vg.Points(3.5)
		p.Add(l)
		p.Legend.Add("TTFT p95", l)
	}
	// Scaling events as thin vertical lines: a cold start lines up with them.
	top := maxMs / div * legendRoom
	for _, b := range series {
		for _, e := range b.Events {
			x := float64(e.Time.Unix())
			l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: top}})
			if err != nil {
				return nil, fmt.Errorf("chart event: %w", err)
			}
			l.Color, l.Width, l.Dashes = chartEvent, vg.Points(1.5), []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l)
		}
	}
	w := d.Diagnosis.Window
	p.X.Min, p.X.Max = float64(w.From.Unix()), float64(w.To.Unix())
	p.Y.Max = maxMs / div * legendRoom
	return p, nil
}

func compareChart(c *CompareData) (*plot.Plot, error) {
	var names []string
	var before, after plotter.Values
	maxMs := 0.0
	for _, name := range []string{diagnose.ComponentTTFT, diagnose.ComponentQueue, diagnose.ComponentPrefill,
		diagnose.ComponentNetwork, diagnose.ComponentPreInference, diagnose.ComponentDecode, diagnose.ComponentE2E} {
		for _, ch := range c.Comparison.Changes {
			if ch.Name == name && ch.Before.P95 != nil && ch.After.P95 != nil {
				names = append(names, diagnose.MetricLabel(name))
				before = append(before, *ch.Before.P95)
				after = append(after, *ch.After.P95)
				maxMs = math.Max(maxMs, math.Max(*ch.Before.P95, *ch.After.P95))
			}
		}
	}
	if len(names) == 0 || maxMs <= 0 {
		return nil, nil
	}
	div, unit := msScale(maxMs)
	for i := range before {
		before[i] /= div
		after[i] /= div
	}
	who := c.Params.Service
	if who == "" {
		who = "all services"
	}
	p := newChart(who + ": p95 before and after")
	p.Y.Tick.Marker = roundTicks{unit: unit}
	p.Y.Min = 0
	// Bars a third of each category's share of the ~880 pt plot width.
	width := vg.Points(math.Min(90, 880/float64(len(names))/3))
	b, err := plotter.NewBarChart(before, width)
	if err != nil {
		return nil, fmt.Errorf("chart before: %w", err)
	}
	b.Color, b.LineStyle.Width, b.Offset = chartPrior, 0, -width/2
	a, err := plotter.NewBarChart(after, width)
	if err != nil {
		return nil, fmt.Errorf("chart after: %w", err)
	}
	a.Color, a.LineStyle.Width, a.Offset = chartAfter, 0, width/2
	p.Add(b, a)
	p.Legend.Add("before", b)
	p.Legend.Add("after", a)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	p.Y.Max = maxMs / div * legendRoom
	return p, nil
}

func valueOr(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
