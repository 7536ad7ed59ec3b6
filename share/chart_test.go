package share

import (
	"bytes"
	"image"
	"image/png"
	"testing"
	"time"

	"gonum.org/v1/plot"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

func ptr(v float64) *float64 { return &v }

// queueingSnapshot is a diagnosis whose queue p95 climbs from 20 ms to
// 2.4 s over an hour, with one scale-up in the middle.
func queueingSnapshot() Snapshot {
	from := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	var series []diagnose.Bucket
	for i := range 12 {
		q := 20 + float64(i*i)*20
		b := diagnose.Bucket{Start: from.Add(time.Duration(i) * 5 * time.Minute), Requests: 40,
			TTFT: diagnose.Percentiles{P95: ptr(q + 300)},
			P95:  map[string]float64{diagnose.ComponentQueue: q, diagnose.ComponentPrefill: 250, diagnose.ComponentNetwork: 30}}
		if i == 6 {
			b.Events = []diagnose.EventMark{{Time: b.Start.Add(time.Minute), Kind: "scale"}}
		}
		series = append(series, b)
	}
	d := diagnose.Diagnosis{Verdict: diagnose.VerdictQueueing, Series: series, BucketSeconds: 300,
		Window: diagnose.Range{From: from, To: from.Add(time.Hour)}}
	return Snapshot{Kind: KindDiagnose, Diagnose: &DiagnoseData{Params: DiagnoseParams{Service: "rag-chat"}, Diagnosis: d}}
}

func TestChartPNGIsTheUnfurlSize(t *testing.T) {
	before, after := 300.0, 2400.0
	cmp := Snapshot{Kind: KindCompare, Compare: &CompareData{Params: CompareParams{Service: "rag-chat"},
		Comparison: diagnose.Comparison{Changes: []diagnose.Change{
			{Name: diagnose.ComponentTTFT, Before: diagnose.Percentiles{P95: &before}, After: diagnose.Percentiles{P95: &after}},
		}}}}
	for name, snap := range map[string]Snapshot{"diagnosis": queueingSnapshot(), "comparison": cmp} {
		b, err := snap.ChartPNG()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", name, err)
		}
		if got := img.Bounds().Size(); got != (image.Point{ChartWidthPx, ChartHeightPx}) {
			t.Errorf("%s: picture is %v, want %dx%d", name, got, ChartWidthPx, ChartHeightPx)
		}
		if distinctColours(img) < 5 {
			t.Errorf("%s: the picture has fewer than 5 colours: nothing drawn", name)
		}
	}
}

func TestChartPNGNothingToDraw(t *testing.T) {
	empty := queueingSnapshot()
	empty.Diagnose.Diagnosis.Series = nil
	for name, snap := range map[string]Snapshot{"trace": {Kind: KindTrace, Trace: &TraceData{TraceID: "ab"}}, "empty window": empty} {
		if b, err := snap.ChartPNG(); err != nil || b != nil {
			t.Errorf("%s: ChartPNG = %d bytes, %v; want none", name, len(b), err)
		}
	}
}

func TestRoundTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   []string
	}{
		{0, 44.7, []string{"0 s", "10 s", "20 s", "30 s", "40 s"}},
		{0, 2.4, []string{"0 s", "0.5 s", "1 s", "1.5 s", "2 s"}},
		{0, 130, []string{"0 s", "50 s", "100 s"}},
		{0, 2.7, []string{"0 s", "0.5 s", "1 s", "1.5 s", "2 s", "2.5 s"}},
		{0, 0.3, []string{"0 s", "0.05 s", "0.1 s", "0.15 s", "0.2 s", "0.25 s", "0.3 s"}},
		{2.3, 22.3, []string{"5 s", "10 s", "15 s", "20 s"}},
	} {
		var got []string
		for _, tk := range (roundTicks{unit: "s"}).Ticks(c.lo, c.hi) {
			got = append(got, tk.Label)
		}
		if !equalStrings(got, c.want) {
			t.Errorf("ticks of %g..%g = %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
	var _ plot.Ticker = roundTicks{}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func distinctColours(img image.Image) int {
	seen := map[[4]uint32]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y += 3 {
		for x := r.Min.X; x < r.Max.X; x += 3 {
			cr, cg, cb, ca := img.At(x, y).RGBA()
			seen[[4]uint32{cr, cg, cb, ca}] = true
		}
	}
	return len(seen)
}
