package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tokenpath/tokenpath/app"
	"github.com/tokenpath/tokenpath/app/apptest"
	"github.com/tokenpath/tokenpath/config"
	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// ingestOptions are the flags of `bench ingest`.
type ingestOptions struct {
	Duration        time.Duration // max-throughput phase, per transport
	LatencyDuration time.Duration // half-load latency phase, per transport
	Concurrency     int           // exporters in the max-throughput phase
	Batch           int           // spans per export request
	Transports      []string
	DatabaseURL     string
	InProcess       bool   // run the server inside the bench (for profiling)
	CPUProfile      string // with InProcess: CPU profile of the load phases
	EngineRows      int    // rows for the raw engine insert measurement
	// FixedRate, when positive, replaces the max-throughput phase by an
	// open loop at this many spans/s (and the half-load phase runs at half
	// of it), so two builds can be compared on the same offered load and
	// the same stored spans (env TOKENPATH_BENCH_INGEST_RATE).
	FixedRate float64
	// PageEvery is how often an API read is timed during and after each
	// phase (defaultPageEvery).
	PageEvery time.Duration
	Log       io.Writer
}

// phaseStats is what one load phase measured.
type phaseStats struct {
	Wall        time.Duration
	Exports     int64 // acknowledged export requests
	Acked       int64 // acknowledged spans
	Overloaded  int64 // 429 / RESOURCE_EXHAUSTED answers
	Failed      int64 // other failures (spans may or may not be stored)
	FailedSpans int64
	Rejected    int64 // spans refused as invalid in acknowledged exports (partial success)
	FirstError  string
	Latencies   []time.Duration // acknowledged exports, from due time (open loop) or send (closed loop)
	AckedRate   float64         // spans/s over the whole phase
	SteadyAcked float64         // spans/s acknowledged over the second half
	SteadyWrite float64         // spans/s the server wrote to ClickHouse over the second half
	Sustained   float64         // acked spans / (phase + drain): what the server keeps up end to end
	TargetRate  float64         // open loop: offered spans/s
	ServerCores float64         // server CPU time / wall
	ClientCores float64
	OtherCores  float64   // CPU the rest of the machine used meanwhile (noise)
	LoadAvg     float64   // 1-minute load average at the end
	Mem         memStatus // server RSS at the end, VmHWM over the phase
	Backlog     float64   // rows acknowledged but not yet written, at the end
	Drain       time.Duration
	// ServerCPUPerSpan is the server's CPU time from the phase's start to
	// the end of its drain, per acknowledged span: what a span costs end
	// to end (receive, WAL, normalize, insert, assemble), whatever share
	// of the shared machine the server got.
	ServerCPUPerSpan time.Duration
	// Assembler lag: how far the assembler's watermark trailed the clock
	// (at most, sampled each second, over the phase and its drain), and
	// how long after the drain it took to assemble every span written
	// (watermark past the drain's end). Its own Lag setting (2 s) and
	// pass interval (1 s) are the floor of both.
	// The wait is capped (assembleWait); AssemblerBehind says it ran out.
	AssemblerMaxLag  time.Duration
	AssemblerCatchUp time.Duration
	AssemblerBehind  bool
	// AssembledCPUPerSpan is ServerCPUPerSpan until the assembler caught up
	// (or the wait ran out).
	AssembledCPUPerSpan time.Duration
	// Active parts of spans: at most (sampled each second over the phase,
	// its drain and the assembler's catching up) and at the end: how far
	// merges fell behind the inserts.
	SpansPartsMax, SpansPartsEnd float64
	// What the server's memory held at the highest RSS sampled while
	// exports were sent (PhasePeak), and after, while the backlog drained
	// and the assembler caught up (AfterPeak).
	PhasePeak, AfterPeak rssPeak
	// How long the API's reads took meanwhile (pageReads, one every
	// PageEvery).
	Pages pageTimes
	// The server's own view of the phase (its /metrics histograms): time
	// to acknowledge an export, and the write-ahead log's group commits.
	ServerExport, WALSync histogram
	// The assembler's time by pass stage from the phase's start until it
	// caught up (or the bench stopped waiting), seconds.
	AssemblerStages map[string]float64
}

// catchUp says when the assembler caught up after the drain, or that it
// had not when the bench stopped waiting.
func (p *phaseStats) catchUp() string {
	if p.AssemblerBehind {
		return fmt.Sprintf("still behind %s after the drain (the bench stopped waiting)", ms(p.AssemblerCatchUp))
	}
	return fmt.Sprintf("caught up %s after the drain", ms(p.AssemblerCatchUp))
}

func (p *phaseStats) percentile(q float64) time.Duration {
	if len(p.Latencies) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), p.Latencies...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q * float64(len(s)-1))
	return s[i]
}

// transportResult is one transport's two phases.
type transportResult struct {
	Transport string
	Max       phaseStats
	Half      phaseStats
}

// ingestReport is the whole ingest bench.
type ingestReport struct {
	Options     ingestOptions
	Results     []transportResult
	Acked       int64 // spans acknowledged over all phases
	Uncertain   int64 // spans of failed exports (not acknowledged, maybe stored)
	Stored      int64 // spans in the server's ClickHouse after it stopped
	Distinct    int64 // distinct (trace_id, span_id) among them
	Requests    int64 // llm_requests rows assembled by the time the server stopped
	WALLeft     int   // write-ahead log segments left behind
	ServerPeak  memStatus
	AvgWriteRow float64 // rows per ClickHouse insert in the server
	Engine      engineStats
	SpansPerReq int
}

// ingestTarget is a running server under test.
type ingestTarget struct {
	pid                     int
	grpcAddr, httpAddr, web string
	dataDir                 string
	inProcess               bool
	stop                    func() error
	logTail                 func(n int) string // the server's log, when it runs apart
	dropSchema              func()
	dbURL                   string // the server's PostgreSQL (its own schema)
	buildTime, startTime    time.Duration
	templates               []*traceTemplate
	seq                     atomic.Uint64 // send sequence: makes every export's trace ids new
	watermarks              *watermarkReader
	pageEvery               time.Duration
	logf                    func(format string, args ...any) // progress while the bench waits
}

func (o *ingestOptions) defaults() {
	if o.Duration <= 0 {
		o.Duration = 60 * time.Second
	}
	if o.LatencyDuration <= 0 {
		o.LatencyDuration = max(o.Duration/2, 3*time.Second)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.Batch <= 0 {
		o.Batch = 1000
	}
	if len(o.Transports) == 0 {
		o.Transports = []string{"grpc", "http"}
	}
	if o.DatabaseURL == "" {
		o.DatabaseURL = databaseURL()
	}
	if o.EngineRows <= 0 {
		o.EngineRows = 1_000_000
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.PageEvery <= 0 {
		o.PageEvery = defaultPageEvery
	}
	if o.FixedRate == 0 {
		if v, err := strconv.ParseFloat(os.Getenv("TOKENPATH_BENCH_INGEST_RATE"), 64); err == nil && v > 0 {
			o.FixedRate = v
		}
	}
}

// logPhaseCPU logs what a phase cost the server per acknowledged span.
func logPhaseCPU(logf func(string, ...any), tr, phase string, p *phaseStats) {
	logf("%s: %s phase: %d spans acked at %.0f/s, server CPU per span %s (phase + drain), %s until assembled; %.2f server cores, %.2f other cores; assembler at most %s behind, %s; export latency p50 %s p90 %s p99 %s p99.9 %s max %s",
		tr, phase, p.Acked, p.AckedRate, p.ServerCPUPerSpan.Round(10*time.Nanosecond), p.AssembledCPUPerSpan.Round(10*time.Nanosecond),
		p.ServerCores, p.OtherCores, p.AssemblerMaxLag.Round(100*time.Millisecond), p.catchUp(),
		p.percentile(0.5).Round(time.Millisecond), p.percentile(0.9).Round(time.Millisecond), p.percentile(0.99).Round(time.Millisecond),
		p.percentile(0.999).Round(time.Millisecond), p.percentile(1).Round(time.Millisecond))
	for _, h := range []struct {
		what string
		h    histogram
	}{{"server's time to acknowledge an export", p.ServerExport}, {"write-ahead log group commit", p.WALSync}} {
		p99, n, slow := h.h.quantile(0.99, 0.25)
		logf("%s: %s phase: %s: p99 ≤ %gs over %.0f, %.0f over 250 ms", tr, phase, h.what, p99, n, slow)
	}
	logf("%s: %s phase: assembler's time by stage until assembled:%s", tr, phase, stageTimes(p.AssemblerStages))
}

// stageTimes lists the assembler's stages, longest first.
func stageTimes(secs map[string]float64) string {
	stages := make([]string, 0, len(secs))
	total := 0.0
	for s, v := range secs {
		stages = append(stages, s)
		total += v
	}
	sort.Slice(stages, func(i, j int) bool { return secs[stages[i]] > secs[stages[j]] })
	var b strings.Builder
	fmt.Fprintf(&b, " %.1f s in all", total)
	for _, s := range stages {
		fmt.Fprintf(&b, ", %s %.1f", s, secs[s])
	}
	return b.String()
}

// runIngest runs the whole ingest bench and returns its figures.
func runIngest(ctx context.Context, opts ingestOptions) (*ingestReport, error) {
	opts.defaults()
	work, err := os.MkdirTemp("", "tokenpath-bench-ingest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	logf := func(format string, args ...any) { fmt.Fprintf(opts.Log, "ingest: "+format+"\n", args...) }

	base := time.Now().Add(-2 * time.Minute)
	templates, err := buildTemplates(16, opts.Batch, 1, base)
	if err != nil {
		return nil, err
	}
	logf("%d export templates of %d spans (%d KiB each)", len(templates), templates[0].spans, len(templates[0].body)>>10)

	t, err := startTarget(ctx, opts, work)
	if err != nil {
		return nil, err
	}
	defer t.dropSchema()
	t.templates = templates
	t.watermarks = &watermarkReader{url: t.dbURL}
	defer t.watermarks.close()
	t.pageEvery = opts.PageEvery
	t.logf = logf
	logf("server up (pid %d, build %s, start %s); data dir %s", t.pid, t.buildTime.Round(time.Millisecond), t.startTime.Round(time.Millisecond), t.dataDir)

	rep := &ingestReport{Options: opts, SpansPerReq: 4}
	m0, _ := scrapeMetrics(ctx, t.web)
	runErr := func() error {
		for _, tr := range opts.Transports {
			res := transportResult{Transport: tr}
			if opts.FixedRate > 0 {
				logf("%s: fixed-rate phase at %.0f spans/s (instead of max throughput), %s", tr, opts.FixedRate, opts.Duration)
				res.Max = t.openLoop(ctx, tr, opts.FixedRate, opts.Duration)
			} else {
				logf("%s: max-throughput phase, %d exporters, %s", tr, opts.Concurrency, opts.Duration)
				res.Max = t.closedLoop(ctx, tr, opts.Concurrency, opts.Duration)
			}
			logPhaseCPU(logf, tr, "first", &res.Max)
			logf("%s: acknowledged %d spans (%.0f/s, steady %.0f/s acked, %.0f/s written), %d overloaded, %d failed; drained %.0f rows in %s",
				tr, res.Max.Acked, res.Max.AckedRate, res.Max.SteadyAcked, res.Max.SteadyWrite, res.Max.Overloaded, res.Max.Failed, res.Max.Backlog, res.Max.Drain.Round(time.Millisecond))
			if res.Max.Sustained <= 0 {
				return fmt.Errorf("%s: no span was acknowledged (first error: %s); server log:\n%s", tr, res.Max.FirstError, t.log(3000))
			}
			rate := res.Max.Sustained / 2
			if opts.FixedRate > 0 {
				rate = opts.FixedRate / 2
			}
			logf("%s: latency phase at %.0f spans/s for %s", tr, rate, opts.LatencyDuration)
			res.Half = t.openLoop(ctx, tr, rate, opts.LatencyDuration)
			logf("%s: p50 %s p99 %s over %d exports, %d overloaded, %d failed", tr, res.Half.percentile(0.5).Round(time.Millisecond),
				res.Half.percentile(0.99).Round(time.Millisecond), res.Half.Exports, res.Half.Overloaded, res.Half.Failed)
			logPhaseCPU(logf, tr, "half-load", &res.Half)
			for _, p := range []*phaseStats{&res.Max, &res.Half} {
				rep.Acked += p.Acked
				rep.Uncertain += p.FailedSpans
				rep.ServerPeak.Peak = max(rep.ServerPeak.Peak, p.Mem.Peak)
			}
			rep.Results = append(rep.Results, res)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return nil
	}()
	if m1, err := scrapeMetrics(ctx, t.web); err == nil && m1.Writes > m0.Writes {
		rep.AvgWriteRow = (m1.WrittenRows - m0.WrittenRows) / (m1.Writes - m0.Writes)
	}
	rep.ServerPeak.RSS = readMem(t.pid).RSS
	logf("stopping the server")
	if err := t.stop(); err != nil && runErr == nil {
		runErr = err
	}
	if runErr != nil {
		return rep, runErr
	}

	// The server is gone: its data dir (and the one engine a process may
	// hold) are ours now.
	if err := countStored(ctx, t.dataDir, rep); err != nil {
		return rep, err
	}
	logf("stored %d spans (%d distinct) for %d acknowledged; %d llm_requests assembled; %d WAL segments left",
		rep.Stored, rep.Distinct, rep.Acked, rep.Requests, rep.WALLeft)

	batch := int(rep.AvgWriteRow)
	if batch <= 0 {
		batch = 50_000
	}
	batch = min(max(batch, opts.Batch), 200_000)
	logf("raw engine: inserting %d rows in batches of %d", opts.EngineRows, batch)
	rep.Engine, err = measureEngine(ctx, filepath.Join(work, "engine"), templates, opts.EngineRows, batch)
	if err != nil {
		return rep, err
	}
	logf("raw engine: %.0f rows/s", rep.Engine.InsertRate())
	return rep, nil
}

// startTarget builds and starts the server process (or an in-process app).
func startTarget(ctx context.Context, opts ingestOptions, work string) (*ingestTarget, error) {
	dbURL, drop, err := freshSchema(ctx, opts.DatabaseURL)
	if err != nil {
		return nil, err
	}
	t := &ingestTarget{dataDir: filepath.Join(work, "server"), dropSchema: drop, inProcess: opts.InProcess, dbURL: dbURL}
	env := map[string]string{
		"TOKENPATH_DATA_DIR":       t.dataDir,
		"TOKENPATH_DATABASE_URL":   dbURL,
		"TOKENPATH_BOOTSTRAP_KEY":  benchKey,
		"TOKENPATH_HTTP_ADDR":      "127.0.0.1:0",
		"TOKENPATH_OTLP_GRPC_ADDR": "127.0.0.1:0",
		"TOKENPATH_OTLP_HTTP_ADDR": "127.0.0.1:0",
		"TOKENPATH_LOG_FORMAT":     "json",
	}
	if lib, err := clickhouse.LibraryPath(); err == nil {
		env["TOKENPATH_CHDB_LIB"] = lib
	}
	t0 := time.Now()
	if opts.InProcess {
		cfg, err := config.Load("tokenpath-bench", nil, func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			drop()
			return nil, err
		}
		log := slog.New(slog.NewJSONHandler(io.Discard, nil))
		a, err := app.Start(ctx, cfg, log)
		if err != nil {
			drop()
			return nil, fmt.Errorf("start tokenpath in process: %w", err)
		}
		t.startTime = time.Since(t0)
		t.pid = os.Getpid()
		t.grpcAddr, t.httpAddr, t.web = a.OTLPGRPCAddr, a.OTLPHTTPAddr, a.HTTPAddr
		stopProfile := func() {}
		if opts.CPUProfile != "" {
			f, err := os.Create(opts.CPUProfile)
			if err != nil {
				a.Stop(context.Background())
				drop()
				return nil, err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				f.Close()
				a.Stop(context.Background())
				drop()
				return nil, err
			}
			stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
		}
		t.stop = func() error { stopProfile(); a.Stop(context.Background()); return nil }
		return t, nil
	}
	bin, err := apptest.BuildServer(ctx, work)
	if err != nil {
		drop()
		return nil, err
	}
	t.buildTime = time.Since(t0)
	var envList []string
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	// The server finds node_modules (libchdb) from its working directory.
	root, _ := apptest.RepoRoot()
	t1 := time.Now()
	p, err := apptest.Launch(ctx, bin, apptest.ProcessOptions{DataDir: t.dataDir, DatabaseURL: dbURL, Dir: root, Env: envList})
	if err != nil {
		drop()
		return nil, err
	}
	t.startTime = time.Since(t1)
	t.pid = p.Pid()
	t.web, t.grpcAddr, t.httpAddr = p.UI, p.OTLPGRPC, p.OTLPHTTP
	t.logTail = p.LogTail
	t.stop = func() error {
		if err := p.Terminate(90 * time.Second); err != nil {
			return fmt.Errorf("%w; log:\n%s", err, p.LogTail(3000))
		}
		return nil
	}
	return t, nil
}

// log is the tail of the server's log (nothing for an app in this process).
func (t *ingestTarget) log(n int) string {
	if t.logTail == nil {
		return ""
	}
	return t.logTail(n)
}
