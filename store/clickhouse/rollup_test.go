package clickhouse

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
)

// The engine's histogram key (what the rollup views store) is HistKey's for
// every kind of value, and a key reads back within ±2.5 % of the values it
// holds (0 for values ≤ 0).
func TestHistKeyMatchesEngine(t *testing.T) {
	s := openTemp(t, t.TempDir())
	defer s.Close()
	values := []float64{0, -3, 1e-9, 0.001, 0.5, 1, 1.05, 2, 99.999, 100, 1234.5678, 6e5, 3.6e6, 1e12, 1e300}
	for i := 1; i < 200; i++ {
		values = append(values, math.Pow(1.037, float64(i))*0.37)
	}
	lits := make([]string, len(values))
	for i, v := range values {
		lits[i] = fmt.Sprintf("toFloat64(%v)", v)
	}
	r, err := s.Query(context.Background(), "SELECT v, "+histKeySQL("v")+" AS k FROM (SELECT arrayJoin(["+strings.Join(lits, ", ")+"]) AS v)")
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != len(values) {
		t.Fatalf("%d rows, want %d", r.Len(), len(values))
	}
	for i := range r.Len() {
		v, k := r.Row(i).Float("v"), int(r.Row(i).Int("k"))
		if want := HistKey(v); k != want {
			t.Errorf("key of %v: engine %d, Go %d", v, k, want)
		}
		back := HistValue(k)
		switch {
		case v <= 0:
			if back != 0 {
				t.Errorf("%v reads back as %v, want 0", v, back)
			}
		case v < 1e-100 || v > 1e100: // clamped to the key range
		case math.Abs(back-v) > 0.025*v:
			t.Errorf("%v reads back as %v (key %d): more than 2.5 %% off", v, back, k)
		}
	}
}
