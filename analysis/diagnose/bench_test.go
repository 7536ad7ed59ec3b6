package diagnose

import "testing"

// BenchmarkDiagnoseBig diagnoses ~100k window and ~300k baseline requests.
func BenchmarkDiagnoseBig(b *testing.B) {
	w := newWorld(1)
	w.rate = 170
	queueSaturation(w)
	in := w.input()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Diagnose(in)
	}
}
