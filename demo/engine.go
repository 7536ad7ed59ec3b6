package demo

import (
	"time"
)

// Engine is the simulated vLLM replica's hardware and scheduler limits.
// The defaults describe Llama-3.1-8B-Instruct in bf16 on one 24 GB GPU:
// the KV cache gets the ~8 GiB left after 16 GB of weights, at 128 KiB per
// token (2 × 32 layers × 8 KV heads × 128 dims × 2 bytes).
type Engine struct {
	// MaxNumSeqs caps the running batch (vLLM --max-num-seqs).
	MaxNumSeqs int
	// KVCacheTokens is the KV cache size in tokens.
	KVCacheTokens int
	// MaxBatchedTokens caps the prompt tokens prefilled in one step
	// (vLLM --max-num-batched-tokens); one prompt may exceed it alone.
	MaxBatchedTokens int
	// Prefill of one prompt takes PrefillBase + PrefillPerToken × tokens:
	// compute-bound, linear in the prompt.
	PrefillBase, PrefillPerToken time.Duration
	// One decode step (one token for every running sequence) takes
	// DecodeBase + DecodePerSeq × running: memory-bound, it reads the
	// weights once and every sequence's KV.
	DecodeBase, DecodePerSeq time.Duration
}

// DefaultEngine is the replica the demo runs.
var DefaultEngine = Engine{
	MaxNumSeqs:       256,
	KVCacheTokens:    65536, // 4096 blocks of 16 tokens
	MaxBatchedTokens: 16384,
	PrefillBase:      15 * time.Millisecond,
	PrefillPerToken:  80 * time.Microsecond,
	DecodeBase:       12 * time.Millisecond,
	DecodePerSeq:     1200 * time.Microsecond,
}

// PrefillTime is the time to prefill a prompt of tokens tokens.
func (e Engine) PrefillTime(tokens int) time.Duration {
	return e.PrefillBase + e.PrefillPerToken*time.Duration(tokens)
}

// DecodeStep is the time of one decode step with running sequences.
func (e Engine) DecodeStep(running int) time.Duration {
	return e.DecodeBase + e.DecodePerSeq*time.Duration(running)
}

// seq is one request inside a vLLM replica.
type seq struct {
	call      *ragCall
	arrive    time.Time
	scheduled time.Time
	first     time.Time // first token
	prompt    int
	output    int
	generated int
	// kvNeed is reserved at admission: the prompt plus the tokens the
	// request will generate, so an admitted request is never preempted.
	kvNeed int
}

// replica is one vLLM pod: a FCFS waiting queue, a running batch and the
// KV blocks they hold. It runs iteration by iteration: a step either
// prefills newly admitted prompts (the running batch stalls meanwhile, as
// in vLLM without chunked prefill) or decodes one token for every running
// sequence.
type replica struct {
	res      *Resource
	started  time.Time
	ready    bool
	draining bool // scaled down: takes no new requests, leaves when empty
	gone     bool
	waiting  []*seq
	running  []*seq
	kvUsed   int
	busy     bool // a step is in progress
}

func (r *replica) load() int { return len(r.waiting) + len(r.running) }

// kvUsage is the fraction of KV blocks reserved, the figure vLLM exports
// as vllm:kv_cache_usage_perc.
func (r *replica) kvUsage(e Engine) float64 {
	return float64(r.kvUsed) / float64(e.KVCacheTokens)
}

// admit moves waiting requests into the batch at t, in arrival order,
// while the batch has a slot, the KV cache has room for the head of the
// queue and the step's prefill budget allows. A head that does not fit
// blocks those behind it, as vLLM's FCFS scheduler does. Admitted prompts
// are prefilled one after another; each one's queue time runs until its
// own prefill begins. It returns the admitted requests and the step's end.
func (r *replica) admit(e Engine, t time.Time) ([]*seq, time.Time) {
	var admitted []*seq
	budget := e.MaxBatchedTokens
	cursor := t
	for len(r.waiting) > 0 && len(r.running)+len(admitted) < e.MaxNumSeqs {
		q := r.waiting[0]
		if r.kvUsed+q.kvNeed > e.KVCacheTokens {
			break
		}
		if len(admitted) > 0 && q.prompt > budget {
			break
		}
		r.waiting = r.waiting[1:]
		r.kvUsed += q.kvNeed
		budget -= q.prompt
		q.scheduled = cursor
		cursor = cursor.Add(e.PrefillTime(q.prompt))
		q.first = cursor
		q.generated = 1
		admitted = append(admitted, q)
	}
	return admitted, cursor
}

// release frees a finished request's KV blocks.
func (r *replica) release(q *seq) { r.kvUsed -= q.kvNeed }
