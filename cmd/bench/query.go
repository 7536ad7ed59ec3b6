package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/analysis/episode"
	"github.com/tokenpath/tokenpath/app"
	"github.com/tokenpath/tokenpath/app/apptest/uiclient"
	"github.com/tokenpath/tokenpath/config"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/postgres"
)

// queryOptions are the flags of `bench query`.
type queryOptions struct {
	Rows []int // dataset sizes, ascending; each grows the previous one
	Reps int   // runs per measurement (the median is reported)
	HTTP bool  // also measure through the real handlers (app.Start)
	// GaugeInterval is the scrape interval of the synthetic vLLM gauges
	// (15 s, as Prometheus scrapes; coarser for smoke runs).
	GaugeInterval time.Duration
	DatabaseURL   string
	Log           io.Writer
	// WhatIf also times the proposed fixes on the largest size.
	WhatIf bool
	// Windows limits the windows measured (names of windows); empty = all.
	Windows []string
	// Ops limits the pages measured; empty = all.
	Ops []string
	// CPUProfile, when set, profiles the page measurements (and the HTTP
	// ones into CPUProfile + ".http").
	CPUProfile string
	// MaxRows overrides analysis.DefaultMaxRows (rows a diagnosis loads).
	MaxRows int
	// Keep, when set, is a work dir kept between runs: a dataset already
	// loaded there (same sizes) is reused, so iterating on a query does not
	// pay the load each time. Needs HTTP off.
	Keep string
	// OnlyWhatIf skips the page measurements (and HTTP): load, then time
	// the proposed fixes.
	OnlyWhatIf bool
	// Span is how far back the dataset's requests reach (default 7 days):
	// --span 26h puts every row in the episode detector's reach, so
	// --rows 1000000 is 1M requests a day.
	Span time.Duration
}

// opTiming is one page query at one window size.
type opTiming struct {
	Op, Window string
	// API is the analysis.Queries call; HTTP the /api/v1 endpoint of a
	// running app; SQL the op's main statement alone through the reader
	// the page used (engine + decoding: Recorded.Rerun); Engine the same statement with
	// FORMAT Null (the engine alone); AllEngine every statement the op
	// issues, FORMAT Null.
	API, HTTP, SQL, Engine, AllEngine []time.Duration
	// Page is the HTML page showing the op (overview for series, the
	// diagnose page, requests page, compare page), logged in.
	Page []time.Duration
	// Deferred is the part the page fetches after it has loaded (the
	// diagnose page's diagnosis, /diagnose/results), logged in.
	Deferred []time.Duration
	MainRows int // rows the main statement returns
	// Rows is what every statement of the op read, as the page ran them.
	Rows int
	Err  string
}

// sizeResult is everything measured at one dataset size.
type sizeResult struct {
	Rows      int
	Load      loadStats
	Points    int
	Parts     int64 // active llm_requests parts when measured
	Ops       []*opTiming
	MemLoaded memStatus // bench process after the load
	MemQuery  memStatus // RSS after the queries, VmHWM over them
	MemHTTP   memStatus // with the app running: RSS after, peak over
	WhatIfs   []*whatIf
	// OtherCores is the CPU other processes used while this size was
	// measured (the machine is shared): a noise indicator, as is LoadAvg.
	OtherCores, LoadAvg float64
}

type queryReport struct {
	Options queryOptions
	Sizes   []*sizeResult
}

var windows = []struct {
	name string
	d    time.Duration
}{{"1h", time.Hour}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// runQuery loads each dataset size and measures the pages on it.
func runQuery(ctx context.Context, opts queryOptions) (*queryReport, error) {
	if opts.Reps <= 0 {
		opts.Reps = 5
	}
	if opts.DatabaseURL == "" {
		opts.DatabaseURL = databaseURL()
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.GaugeInterval <= 0 {
		opts.GaugeInterval = 15 * time.Second
	}
	logf := func(format string, args ...any) { fmt.Fprintf(opts.Log, "query: "+format+"\n", args...) }
	sort.Ints(opts.Rows)
	work, err := os.MkdirTemp("", "tokenpath-bench-query-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	dataDir := filepath.Join(work, "data")
	var kept *keptDataset
	if opts.Keep != "" {
		if opts.HTTP {
			return nil, errors.New("--keep needs --no-http")
		}
		dataDir = filepath.Join(opts.Keep, "data")
		if kept, err = readKept(opts.Keep); err != nil {
			return nil, err
		}
	}

	// PostgreSQL first: the project id and an assembler watermark in the
	// future, so the app started later leaves the synthetic rows alone.
	var dbURL string
	var project int64
	if opts.HTTP {
		u, drop, err := freshSchema(ctx, opts.DatabaseURL)
		if err != nil {
			return nil, err
		}
		defer drop()
		dbURL = u
		pg, err := postgres.Open(ctx, dbURL)
		if err != nil {
			return nil, err
		}
		err = pg.Migrate(ctx)
		if err == nil {
			project, err = pg.EnsureProjectWithKey(ctx, "default", benchKey)
		}
		if err == nil {
			_, err = pg.Pool.Exec(ctx, "INSERT INTO assembly_watermarks (name, watermark) VALUES ('assembler', $1)", time.Now().Add(24*time.Hour).UnixNano())
		}
		pg.Close()
		if err != nil {
			return nil, fmt.Errorf("prepare postgres: %w", err)
		}
	} else {
		project = 1
	}

	rep := &queryReport{Options: opts}
	d := newDataset(uint32(project), time.Now(), opts.Span)
	d.scrapeInterval = opts.GaugeInterval
	if kept != nil && kept.Interval == opts.GaugeInterval && kept.Span == opts.Span {
		d = newDataset(uint32(project), kept.End, opts.Span)
		d.scrapeInterval, d.rows = kept.Interval, kept.Rows
		logf("reusing the dataset in %s: %d rows ending %s", opts.Keep, kept.Rows, kept.End.Format(time.RFC3339))
	} else if opts.Keep != "" {
		if err := os.RemoveAll(dataDir); err != nil {
			return nil, err
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	chCfg := clickhouse.Config{DataDir: filepath.Join(dataDir, "clickhouse"), RetentionDays: 30, MaxExecutionTime: 10 * time.Minute}
	for i, rows := range opts.Rows {
		res := &sizeResult{Rows: rows}
		rep.Sizes = append(rep.Sizes, res)
		ch, err := clickhouse.Open(ctx, chCfg, quiet)
		if err != nil {
			return rep, err
		}
		err = func() error {
			defer ch.Close()
			// Also on a kept dataset: it gains migrations added since.
			t0 := time.Now()
			if err := ch.Migrate(ctx); err != nil {
				return err
			}
			if took := time.Since(t0); took > time.Second {
				logf("migrated the stored dataset in %s", took.Round(time.Millisecond))
			}
			if i == 0 && d.rows == 0 {
				n, err := d.addGauges(ctx, ch)
				if err != nil {
					return fmt.Errorf("load gauges: %w", err)
				}
				res.Points = n
				logf("loaded %d metric points and the scaling events", n)
			}
			if more := rows - d.rows; more > 0 {
				logf("loading %d llm_requests rows (total %d)", more, rows)
				st, err := d.addRequests(ctx, ch, more, uint64(1000+i), logf)
				if err != nil {
					return fmt.Errorf("load requests: %w", err)
				}
				res.Load = st
				if opts.Keep != "" {
					if err := writeKept(opts.Keep, keptDataset{End: d.end, Rows: d.rows, Interval: d.scrapeInterval, Span: opts.Span}); err != nil {
						return err
					}
				}
				logf("loaded %d rows + %d spans in %s (%.0f rows/s; generating them took %s)", st.Rows, st.Spans,
					st.Took.Round(time.Millisecond), float64(st.Rows)/st.Took.Seconds(), st.Generate.Round(time.Millisecond))
			}
			if r, err := ch.Query(ctx, "SELECT count() AS n FROM system.parts WHERE database = currentDatabase() AND table = 'llm_requests' AND active"); err == nil {
				res.Parts = r.Row(0).Int("n")
			}
			res.MemLoaded = readMem(os.Getpid())
			resetPeak(os.Getpid())
			t0, self0, busy0 := time.Now(), cpuTime(os.Getpid()), machineBusy()
			defer func() {
				res.OtherCores = ((machineBusy() - busy0) - (cpuTime(os.Getpid()) - self0)).Seconds() / time.Since(t0).Seconds()
				res.LoadAvg = loadAverage()
			}()
			q := &analysis.Queries{CH: ch, MaxRows: opts.MaxRows}
			if opts.CPUProfile != "" {
				stop, err := startProfile(opts.CPUProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			for _, w := range windows {
				if opts.OnlyWhatIf || len(opts.Windows) > 0 && !slices.Contains(opts.Windows, w.name) {
					continue
				}
				for _, op := range []string{"newest", "list", "series", "overview", "diagnose", "compare", "episodes"} {
					if len(opts.Ops) > 0 && !slices.Contains(opts.Ops, op) {
						continue
					}
					t := &opTiming{Op: op, Window: w.name}
					res.Ops = append(res.Ops, t)
					measureOp(ctx, q, ch, d, t, w.d, opts.Reps)
					logf("%d rows, %s %s: API %s, main SQL %s (engine %s), %d rows", rows, op, w.name,
						median(t.API).Round(time.Millisecond), median(t.SQL).Round(time.Millisecond), median(t.Engine).Round(time.Millisecond), t.MainRows)
				}
			}
			res.MemQuery = readMem(os.Getpid())
			if (opts.WhatIf || opts.OnlyWhatIf) && i == len(opts.Rows)-1 {
				logf("%d rows: timing the proposed fixes", rows)
				res.WhatIfs = whatIfs(ctx, q, ch, d, opts.Reps)
			}
			return nil
		}()
		if err != nil {
			return rep, err
		}
		if opts.HTTP && !opts.OnlyWhatIf {
			stop := func() {}
			if opts.CPUProfile != "" {
				// The app serving HTTP runs in this process too: its
				// profile goes beside the page measurements'.
				if stop, err = startProfile(opts.CPUProfile + ".http"); err != nil {
					return rep, err
				}
			}
			err := measureHTTP(ctx, dataDir, dbURL, d, res, opts.Reps, logf)
			stop()
			if err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// timeGets times up to reps GETs of u (fewer past opBudget), with an
// Authorization header when auth is set; a non-200 answer ends the runs.
func timeGets(ctx context.Context, c *http.Client, u, auth string, reps int) ([]time.Duration, error) {
	var out []time.Duration
	began := time.Now()
	for i := 0; i < reps && (i == 0 || time.Since(began) < opBudget); i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return out, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return out, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, body)
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// keptDataset describes the dataset left in a --keep dir.
type keptDataset struct {
	End      time.Time
	Rows     int
	Interval time.Duration
	Span     time.Duration
}

func readKept(dir string) (*keptDataset, error) {
	b, err := os.ReadFile(filepath.Join(dir, "dataset.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var k keptDataset
	if err := json.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("%s/dataset.json: %w", dir, err)
	}
	return &k, nil
}

func writeKept(dir string, k keptDataset) error {
	b, err := json.Marshal(k)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "dataset.json"), b, 0o644)
}

// ranges returns the window ending at the data's end and the one before it.
func (d *dataset) ranges(w time.Duration) (window, before diagnose.Range) {
	return diagnose.Range{From: d.end.Add(-w), To: d.end}, diagnose.Range{From: d.end.Add(-2 * w), To: d.end.Add(-w)}
}

func runOp(ctx context.Context, q *analysis.Queries, d *dataset, op string, w time.Duration) error {
	window, before := d.ranges(w)
	dr := analysis.DiagnoseRequest{Project: d.project, Window: window}
	var err error
	switch op {
	case "newest":
		_, _, err = q.Requests(ctx, analysis.RequestFilter{Project: d.project, From: window.From, To: window.To, Limit: 50})
	case "list":
		_, _, err = q.Requests(ctx, analysis.RequestFilter{Project: d.project, From: window.From, To: window.To, Sort: "ttft", Desc: true, Limit: 50})
	case "series":
		_, _, err = q.Series(ctx, dr)
	case "overview":
		_, err = q.Overview(ctx, analysis.OverviewRequest{Project: d.project, Window: window})
	case "diagnose":
		_, err = q.Diagnose(ctx, dr)
	case "compare":
		_, err = q.Compare(ctx, d.project, before, window, "", "", nil)
	case "episodes":
		// What the episode detector's pass reads and computes when its
		// horizon is the window (24 h by default, read with the baseline's
		// warm-up before it); the store write is a few rows.
		var minutes map[string][]episode.Minute
		minutes, err = q.EpisodeMinutes(ctx, d.project, window.From.Add(-analysis.EpisodeWarmup), window.To)
		analysis.DetectEpisodes(minutes, func(string) episode.Config {
			return episode.Config{TTFTObjective: analysis.DefaultTTFTObjectiveMs, Until: window.To}
		})
	}
	return err
}

// statementLog, when set (bench query --statements), gets each statement's
// engine time.
var statementLog io.Writer

// opBudget bounds the repetitions of one measurement: past it the median
// is of fewer runs (the table says how many). A page slower than slowPage
// is run once, its SQL once, and not again over HTTP: on a shared 2-core
// machine a 7-day diagnosis over 10M rows would otherwise take an hour.
const (
	opBudget = 90 * time.Second
	slowPage = 45 * time.Second
)

// measureOp times the op through analysis.Queries, then each statement it
// ran (clickhouse.Recorder) alone: its main one (the longest) through the
// reader the page used (Recorded.Rerun), and every one with FORMAT Null
// (the engine alone).
func measureOp(ctx context.Context, q *analysis.Queries, ch *clickhouse.Store, d *dataset, t *opTiming, w time.Duration, reps int) {
	began := time.Now()
	for i := 0; i < reps && (i == 0 || time.Since(began) < opBudget && median(t.API) < slowPage); i++ {
		rec := &clickhouse.Recorder{}
		t0 := time.Now()
		if err := runOp(clickhouse.WithRecorder(ctx, rec), q, d, t.Op, w); err != nil {
			t.Err = err.Error()
			return
		}
		t.API = append(t.API, time.Since(t0))
		sts := rec.Statements()
		if len(sts) == 0 {
			t.Err = "the op ran no statement"
			return
		}
		if statementLog != nil && i == 0 {
			// As the page ran them (concurrent ones overlap), once: each
			// is timed alone below.
			for _, s := range sts {
				fmt.Fprintf(statementLog, "query: %s %s page ran: %v  %.1000s\n", t.Op, w, s.Took.Round(time.Millisecond), oneLine(s.SQL))
			}
		}
		main := slices.MaxFunc(sts, func(a, b clickhouse.Recorded) int { return cmp.Compare(a.Took, b.Took) })
		t0 = time.Now()
		rows, err := main.Rerun(ctx)
		if err != nil {
			t.Err = err.Error()
			return
		}
		t.SQL = append(t.SQL, time.Since(t0))
		t.MainRows, t.Rows = rows, 0
		for _, s := range sts {
			t.Rows += s.Rows
		}
		all := time.Duration(0)
		for j, s := range sts {
			t0, c0 := time.Now(), processCPU()
			if _, err := ch.Query(ctx, s.SQL+" FORMAT Null"); err != nil {
				t.Err = err.Error()
				return
			}
			took, cpu := time.Since(t0), processCPU()-c0
			if s.SQL == main.SQL {
				t.Engine = append(t.Engine, took)
			}
			if statementLog != nil {
				fmt.Fprintf(statementLog, "query: %s %s statement %d: %v (CPU %v)  %.110s\n", t.Op, w, j, took.Round(time.Millisecond),
					cpu.Round(time.Millisecond), oneLine(s.SQL))
			}
			all += took
		}
		t.AllEngine = append(t.AllEngine, all)
	}
}

// oneLine folds a statement's whitespace for the log.
func oneLine(sql string) string { return strings.Join(strings.Fields(sql), " ") }

// measureHTTP starts the real app on the data dir and times the /api/v1
// endpoints (handlers, JSON encoding and the loopback included).
func measureHTTP(ctx context.Context, dataDir, dbURL string, d *dataset, res *sizeResult, reps int, logf func(string, ...any)) error {
	env := map[string]string{
		"TOKENPATH_DATA_DIR": dataDir, "TOKENPATH_DATABASE_URL": dbURL, "TOKENPATH_BOOTSTRAP_KEY": benchKey,
		"TOKENPATH_HTTP_ADDR": "127.0.0.1:0", "TOKENPATH_OTLP_GRPC_ADDR": "127.0.0.1:0", "TOKENPATH_OTLP_HTTP_ADDR": "127.0.0.1:0",
	}
	cfg, err := config.Load("tokenpath-bench", nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		return err
	}
	resetPeak(os.Getpid())
	a, err := app.Start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return fmt.Errorf("start app on the bench data: %w", err)
	}
	defer a.Stop(context.Background())
	client := &http.Client{Timeout: 10 * time.Minute}
	rfc := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	browser, err := uiclient.LogIn(ctx, "http://"+a.HTTPAddr, benchKey)
	if err != nil {
		return err
	}
	for _, t := range res.Ops {
		if t.Err != "" || median(t.API) >= slowPage {
			continue // slower than a page may be: not repeated over HTTP
		}
		if t.Op == "episodes" {
			continue // a worker's pass: pages read its stored episodes
		}
		var w time.Duration
		for _, x := range windows {
			if x.name == t.Window {
				w = x.d
			}
		}
		window, before := d.ranges(w)
		v := url.Values{}
		path := "/api/v1/" + t.Op
		switch t.Op {
		case "list", "newest":
			path = "/api/v1/requests"
			v.Set("from", rfc(window.From))
			v.Set("to", rfc(window.To))
			v.Set("limit", "50")
			if t.Op == "list" {
				v.Set("sort", "ttft")
			}
		case "series", "overview", "diagnose":
			v.Set("from", rfc(window.From))
			v.Set("to", rfc(window.To))
		case "compare":
			v.Set("a_from", rfc(before.From))
			v.Set("a_to", rfc(before.To))
			v.Set("b_from", rfc(window.From))
			v.Set("b_to", rfc(window.To))
		}
		u := "http://" + a.HTTPAddr + path + "?" + v.Encode()
		var err error
		if t.Op != "overview" { // the overview has no API of its own
			if t.HTTP, err = timeGets(ctx, client, u, "Bearer "+benchKey, reps); err != nil {
				t.Err = "API: " + err.Error()
			}
		}
		pagePath := map[string]string{"newest": "/requests", "list": "/requests", "series": "/", "overview": "/", "diagnose": "/diagnose", "compare": "/compare"}[t.Op]
		if t.Op == "list" || t.Op == "newest" {
			v.Del("limit")
		}
		pu := "http://" + a.HTTPAddr + pagePath + "?" + v.Encode()
		if t.Page, err = timeGets(ctx, browser, pu, "", reps); err != nil {
			t.Err = "page " + pagePath + ": " + err.Error()
		}
		if t.Op == "diagnose" {
			du := "http://" + a.HTTPAddr + "/diagnose/results?" + v.Encode()
			if t.Deferred, err = timeGets(ctx, browser, du, "", reps); err != nil {
				t.Err = "deferred part of " + pagePath + ": " + err.Error()
			}
		}
		logf("%d rows, HTTP %s %s: API %s, page %s", res.Rows, t.Op, t.Window, median(t.HTTP).Round(time.Millisecond), median(t.Page).Round(time.Millisecond))
	}
	res.MemHTTP = readMem(os.Getpid())
	return nil
}
