package assembler

// restPerPass is how long Run rests after a pass that left more for the
// next, per unit of the time the pass took. Passes chained back to back
// while catching up after a burst take a core for as long as the backlog
// lasts, at the receivers' expense: with both cores busy, exports at half
// the node's receive rate waited 0.9–11.5 s (bench ingest, p50–p99).
// Resting as long as it worked keeps the assembler near half a core; a
// pass of 200k spans takes ~2 s, so it still assembles ~50k spans/s.
// (Niceness would be the natural tool, but Go code on a niced thread
// delays every stop-the-world pause of the garbage collector while the
// kernel lets the thread wait: export p99 went to 0.3–4 s.)
const restPerPass = 1.0

// While more than slowAckShare of the acknowledgements during a pass were
// slow (ingest.SlowAck), the rest after it doubles, up to maxRestPerPass:
// the receivers then still have a core and a half when the assembler
// works. It halves again, down to restPerPass, after passes with fewer.
// At the most the assembler still takes a fifth of a core, so it falls
// behind during a long burst but never stops.
//
// After a pass with fewer than minAcksToJudge acknowledgements (a burst
// has ended, and the receivers have nothing to protect) it rests only
// restWhenIdle: catching up is then what makes pages current again. At
// 1× the assembler was still behind 5 minutes after a 3-minute burst
// ended; at a quarter it caught up in 3–3.5 (bench ingest).
// It still rests a little: pages' reads share the engine with it.
const (
	slowAckShare   = 0.01
	maxRestPerPass = 4.0
	minAcksToJudge = 20
	restWhenIdle   = 0.25
)

// nextRestRatio adapts the rest after a pass to the acknowledgements
// during it: all of them and the slow ones.
func nextRestRatio(ratio float64, all, slow uint64) float64 {
	if all < minAcksToJudge {
		return restWhenIdle
	}
	ratio = min(max(ratio, restPerPass), maxRestPerPass)
	if float64(slow) > slowAckShare*float64(all) {
		return min(2*ratio, maxRestPerPass)
	}
	return max(ratio/2, restPerPass)
}

// acks reads Acks, or says nothing was acknowledged without it.
func (a *Assembler) acks() (all, slow uint64) {
	if a.Acks == nil {
		return 0, 0
	}
	return a.Acks()
}
