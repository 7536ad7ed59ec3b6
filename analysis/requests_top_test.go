package analysis_test

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tokenpath/tokenpath/analysis"
	"github.com/tokenpath/tokenpath/store/clickhouse"
	"github.com/tokenpath/tokenpath/store/storetest"
	"github.com/tokenpath/tokenpath/telemetry"
)

// A page sorted by a latency column, read from the top rows without FINAL,
// is the page FINAL gives, after later versions moved requests into and
// out of the top or changed their model, and tombstones deleted some.
func TestRequestsSortedPagesMatchFinal(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	from, to := now.Add(-48*time.Hour), now.Add(time.Minute)
	// Unmerged, every version stays a row of its own for both reads.
	if err := srv.CH.Exec(ctx, "SYSTEM STOP MERGES llm_requests"); err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewSource(1))
	ms := func(scale float64) *float64 { return telemetry.Ptr(scale * (1 + rnd.Float64())) }
	const n = 3000
	rows := make([]telemetry.LLMRequest, n)
	for i := range rows {
		r := telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i+1), SpanID: fmt.Sprintf("%016x", i+1),
			Service: []string{"chat", "agent"}[i%2], ServerService: "vllm", Model: []string{"small", "large"}[i%3/2],
			// Over 36 hours at nanosecond precision: two or three day partitions.
			Start: now.Add(-36*time.Hour + time.Duration(i)*43*time.Second + time.Duration(i)*7919),
			TTFT:  ms(300), E2E: ms(3000), ITL: ms(20), Prefill: ms(40), Network: ms(5), Decode: ms(2000),
			InputTokens: telemetry.Ptr(int64(rnd.Intn(400))), OutputTokens: telemetry.Ptr(int64(rnd.Intn(900)))}
		if i%3 != 0 {
			r.Queue = ms(50) // a third have no queue time: NULLs sort last
		}
		if i%50 == 0 {
			r.PreInference = ms(10) // too few to fill the candidates
		}
		if i%10 == 0 {
			r.ColdStart, r.ColdStartWait = true, ms(20_000) // held while an instance started
		}
		rows[i] = r
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	byTTFT, byE2E := rankTTFTAndE2E(rows[:n])
	// Later versions build on each other: v2 of a request may change both
	// its TTFT and its E2E, v3 builds on v2.
	v2, edit := versionEditor(rows)
	var gone, v3 []telemetry.LLMRequest
	deleted := map[int]bool{}
	var later []int // v2 then v3
	for k, i := range byTTFT[:300] {
		switch k % 6 {
		case 0: // moved down, out of the top
			edit(i, func(r *telemetry.LLMRequest) { r.TTFT = telemetry.Ptr(1 + float64(k)/1000) })
		case 1: // deleted
			gone, deleted[i] = append(gone, rows[i]), true
		case 2: // now served by another model
			edit(i, func(r *telemetry.LLMRequest) { r.Model = "other" })
		case 3: // moved down in v2, back up (but lower) in v3
			edit(i, func(r *telemetry.LLMRequest) { r.TTFT = telemetry.Ptr(2.0) })
			later = append(later, i)
		}
	}
	for k, i := range byTTFT[2000:2100] { // moved up, into the top
		edit(i, func(r *telemetry.LLMRequest) {
			r.TTFT = telemetry.Ptr(1000 + float64(k)*3.7)
			r.Queue = ms(500)
		})
	}
	for _, i := range byE2E[:300] { // the whole E2E top moved down: its candidates prove no page
		if !deleted[i] {
			edit(i, func(r *telemetry.LLMRequest) { r.E2E = telemetry.Ptr(*r.E2E / 100) })
		}
	}
	var v2Rows []telemetry.LLMRequest
	for _, r := range v2 {
		v2Rows = append(v2Rows, r)
	}
	for _, i := range later {
		r := v2[i]
		r.TTFT = telemetry.Ptr(*rows[i].TTFT * 0.8)
		v3 = append(v3, r)
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(v2Rows, gone, 2)); err != nil {
		t.Fatal(err)
	}
	// v3 written twice (a retried insert): the same row twice is no doubt.
	for range 2 {
		if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(v3, nil, 3)); err != nil {
			t.Fatal(err)
		}
	}
	// Two different rows of one request with the same version: FINAL keeps
	// the later written, which the fast path cannot know. It tops decode
	// alone (its other columns are NULL).
	for _, decode := range []float64{90_000, 80_000} {
		r := telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", n+1), SpanID: fmt.Sprintf("%016x", n+1),
			Service: "chat", Model: "small", Start: now.Add(-time.Hour), Decode: telemetry.Ptr(decode)}
		if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch([]telemetry.LLMRequest{r}, nil, 1)); err != nil {
			t.Fatal(err)
		}
	}

	q := &analysis.Queries{CH: srv.CH}
	final := func(f analysis.RequestFilter, extra string, extraArgs ...any) []telemetry.LLMRequest {
		t.Helper()
		where := "project_id = 1 AND start >= ? AND start < ?" + extra
		dir := "ASC"
		if f.Desc {
			dir = "DESC"
		}
		r, err := srv.CH.Query(ctx, "SELECT "+clickhouse.RequestColumns+" FROM llm_requests FINAL WHERE "+where+
			" ORDER BY "+analysis.SortColumns[f.Sort]+" "+dir+" NULLS LAST, start DESC LIMIT ? OFFSET ?"+analysis.FinalSettings,
			append(append([]any{from, to}, extraArgs...), f.Limit, f.Offset)...)
		if err != nil {
			t.Fatal(err)
		}
		return clickhouse.ScanRequests(r)
	}
	slowP90 := func() float64 {
		r, err := srv.CH.Query(ctx, "SELECT quantile(0.9)(coalesce(ttft_ms, e2e_ms)) AS p FROM llm_requests FINAL WHERE project_id = 1 AND start >= ? AND start < ?"+
			analysis.FinalSettings, from, to)
		if err != nil {
			t.Fatal(err)
		}
		return r.Row(0).Float("p")
	}()
	type sortedPage struct {
		sort          string
		desc          bool
		limit, offset int
		model         string
		slow          bool
		// path is "top" when the candidates must prove the page, "final"
		// when they cannot, "" when it hinges on the churn they hold.
		path string
	}
	cases := []sortedPage{
		{sort: "ttft", desc: true, limit: 10, path: "top"},
		{sort: "ttft", desc: true, limit: 50, path: "top"},
		{sort: "ttft", desc: true, limit: 20, offset: 30, path: "top"},
		{sort: "ttft", desc: true, limit: 20, offset: 100, path: "top"},
		{sort: "ttft", desc: true, limit: 100, offset: 150},
		{sort: "ttft", desc: true, limit: 10, offset: 35, model: "large", path: "top"},
		{sort: "ttft", desc: true, limit: 50, model: "other", path: "final"}, // 50 rows: fewer than the candidates sought
		{sort: "ttft", desc: true, limit: 30, slow: true},
		{sort: "ttft", limit: 50, path: "top"},
		{sort: "ttft", limit: 40, offset: 200, path: "top"},
		{sort: "e2e", desc: true, limit: 10, path: "final"},
		{sort: "e2e", limit: 25, offset: 5, path: "top"},
		{sort: "queue", desc: true, limit: 50, path: "top"},
		{sort: "queue", limit: 50, offset: 450, path: "top"},
		{sort: "pre_inference", desc: true, limit: 50, path: "final"},  // the candidates reach the NULLs
		{sort: "pre_inference", desc: true, limit: 100, path: "final"}, // and so does the page
		{sort: "itl", desc: true, limit: 1000, path: "top"},            // past topPageMax Requests reads FINAL; the fast path still agrees
		{sort: "input_tokens", desc: true, limit: 60, offset: 10, path: "top"},
		{sort: "input_tokens", limit: 60, path: "top"},
	}
	for name := range analysis.SortColumns {
		if name == "start" {
			continue
		}
		for _, desc := range []bool{true, false} {
			path := "top"
			switch {
			case name == "decode" && desc, name == "e2e" && desc:
				path = "final" // the request of two rows, the E2E top moved down
			}
			cases = append(cases, sortedPage{sort: name, desc: desc, limit: 20, offset: 3, path: path})
		}
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s desc=%v limit %d offset %d model %q slow %v", c.sort, c.desc, c.limit, c.offset, c.model, c.slow)
		f := analysis.RequestFilter{Project: 1, From: from, To: to, Sort: c.sort, Desc: c.desc, Limit: c.limit, Offset: c.offset,
			Model: c.model, Slow: c.slow, NoTotal: true}
		var extra string
		var extraArgs []any
		if c.model != "" {
			extra, extraArgs = " AND model = ?", []any{c.model}
		}
		if c.slow {
			extra, extraArgs = extra+" AND coalesce(ttft_ms, e2e_ms) > ?", append(extraArgs, slowP90)
		}
		want := final(f, extra, extraArgs...)
		if len(want) == 0 {
			t.Fatalf("%s: FINAL lists no rows", name)
		}
		got, total, err := q.Requests(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if total.N != -1 {
			t.Errorf("%s: total %+v without a count", name, total)
		}
		if diff := firstDiff(got, want); diff != "" {
			t.Errorf("%s: Requests differs from FINAL: %s", name, diff)
		}
		if c.slow {
			continue // the fast path alone does not apply the threshold
		}
		top, found, err := q.TopRequests(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if c.path != "" && found != (c.path == "top") {
			t.Errorf("%s: fast path found a page: %v, want the %s path", name, found, c.path)
		}
		if found {
			if diff := firstDiff(top, want); diff != "" {
				t.Errorf("%s: fast path differs from FINAL: %s", name, diff)
			}
		}
	}
}

func firstDiff(got, want []telemetry.LLMRequest) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("row %d is %s/%s (ttft %v), want %s/%s (ttft %v)", i, got[i].TraceID, got[i].SpanID, fmtPtr(got[i].TTFT),
				want[i].TraceID, want[i].SpanID, fmtPtr(want[i].TTFT))
		}
	}
	return ""
}

// A sorted page over a long window reads its top rows with a bound from the
// stored sample: the TTFT and E2E tops come from their projections as a
// key range, and a bound the sample got wrong (no stored row reaches it)
// costs a second read, not a wrong or short page.
func TestRequestsTopBound(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	from, to := now.Add(-72*time.Hour), now.Add(time.Minute)
	rnd := rand.New(rand.NewSource(2))
	// ~400 rows in the sample's first level, and parts of a few granules
	// (the projection can read fewer of them).
	const n = 100_000
	rows := make([]telemetry.LLMRequest, n)
	for i := range rows {
		rows[i] = telemetry.LLMRequest{ProjectID: 1, TraceID: fmt.Sprintf("%032x", i+1), SpanID: fmt.Sprintf("%016x", i+1),
			Service: "chat", Model: "small", Start: now.Add(-60*time.Hour + time.Duration(i)*2*time.Second),
			TTFT: telemetry.Ptr(100 * (1 + rnd.ExpFloat64())), E2E: telemetry.Ptr(1000 * (1 + rnd.ExpFloat64())),
			Queue: telemetry.Ptr(10 * rnd.ExpFloat64())}
	}
	if err := srv.CH.Insert(ctx, clickhouse.RequestsBatch(rows, nil, 1)); err != nil {
		t.Fatal(err)
	}
	q := &analysis.Queries{CH: srv.CH}
	final := func(f analysis.RequestFilter) []telemetry.LLMRequest {
		t.Helper()
		dir := "ASC"
		if f.Desc {
			dir = "DESC"
		}
		r, err := srv.CH.Query(ctx, "SELECT "+clickhouse.RequestColumns+" FROM llm_requests FINAL WHERE project_id = 1 AND start >= ? AND start < ?"+
			" ORDER BY "+analysis.SortColumns[f.Sort]+" "+dir+" NULLS LAST, start DESC LIMIT ? OFFSET ?"+analysis.FinalSettings, from, to, f.Limit, f.Offset)
		if err != nil {
			t.Fatal(err)
		}
		return clickhouse.ScanRequests(r)
	}
	check := func(name string, f analysis.RequestFilter) {
		t.Helper()
		got, found, err := q.TopRequests(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			t.Fatalf("%s: the fast path proved no page", name)
		}
		if diff := firstDiff(got, final(f)); diff != "" {
			t.Errorf("%s: differs from FINAL: %s", name, diff)
		}
	}
	pages := []analysis.RequestFilter{
		{Sort: "ttft", Desc: true, Limit: 50}, {Sort: "ttft", Limit: 50, Offset: 20},
		{Sort: "e2e", Desc: true, Limit: 100, Offset: 100}, {Sort: "queue", Desc: true, Limit: 50},
	}
	for _, f := range pages {
		f.Project, f.From, f.To = 1, from, to
		name := fmt.Sprintf("%s desc=%v offset %d", f.Sort, f.Desc, f.Offset)
		k := max(2*(f.Offset+f.Limit), 100)
		bound, err := q.TopBound(ctx, f, k)
		if err != nil {
			t.Fatal(err)
		}
		if bound == nil {
			t.Fatalf("%s: no bound from a sample of ~%d rows", name, n/256)
		}
		// The bound is a guess, but one that leaves the top rows in reach.
		reach := 0
		for i := range rows {
			v := *rows[i].TTFT
			switch f.Sort {
			case "e2e":
				v = *rows[i].E2E
			case "queue":
				v = *rows[i].Queue
			}
			if (f.Desc && v >= *bound) || (!f.Desc && v <= *bound) {
				reach++
			}
		}
		if reach < k {
			t.Errorf("%s: %d rows reach the bound %v, want ≥ %d", name, reach, *bound, k)
		}
		check(name, f)
	}

	// The bounded top read of TTFT reads its projection, a key range.
	where := "project_id = ? AND start >= ? AND start < ?"
	plan, err := srv.CH.Query(ctx, "EXPLAIN indexes = 1 "+analysis.TopKeysSQL(where, "ttft_ms", true, true), 1, from, to, 150.0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var explain []string
	for i := range plan.Len() {
		explain = append(explain, fmt.Sprint(plan.Rows[i]...))
	}
	if text := strings.Join(explain, "\n"); !strings.Contains(text, "p_ttft_ms") {
		t.Errorf("the bounded top read does not read the TTFT projection:\n%s", text)
	}

	// A sample that misleads: rows only the sample holds (as a stale
	// version might) set a bound no stored request reaches.
	for i := range 5 {
		if err := srv.CH.Exec(ctx, "INSERT INTO llm_requests_sample (project_id, sample_level, trace_id, span_id, service, start, ttft_ms, version) VALUES (1, 0, ?, 'x', 'chat', ?, 1e9, 1)",
			fmt.Sprintf("ghost%d", i), now.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	f := analysis.RequestFilter{Project: 1, From: from, To: to, Sort: "ttft", Desc: true, Limit: 50}
	if bound, err := q.TopBound(ctx, f, 100); err != nil || bound == nil || *bound != 1e9 {
		t.Fatalf("bound %v (%v), want the ghosts' 1e9", bound, err)
	}
	check("ttft desc past a bound nothing reaches", f)
}

// A list sorted by TTFT or E2E, slowest first, read from the slowest rows
// of each day (llm_request_top: every version ever written, replaced ones
// and tombstones too) is the page FINAL gives: under unmerged versions and
// tombstones, after merges dropped the replaced versions, and after the
// migration refilled the states. Where the day's slowest rows lie outside
// the window, where two requests share a service and start, and where
// FINAL's pick is unknown, it proves no page.
func TestRequestsTopFromStates(t *testing.T) {
	srv := storetest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	if err := srv.CH.Exec(ctx, "SYSTEM STOP MERGES llm_requests"); err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewSource(3))
	ms := func(scale float64) *float64 { return telemetry.Ptr(scale * (1 + rnd.Float64())) }
	insert := func(b *clickhouse.Batch) {
		t.Helper()
		if err := srv.CH.Insert(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	request := func(project uint32, i int, start time.Time) telemetry.LLMRequest {
		return telemetry.LLMRequest{ProjectID: project, TraceID: fmt.Sprintf("%08d%024x", project, i+1), SpanID: fmt.Sprintf("%016x", i+1),
			Service: []string{"chat", "agent"}[i%2], ServerService: "vllm", Model: []string{"small", "large"}[i%3/2], Start: start,
			TTFT: ms(300), E2E: ms(3000), Queue: ms(50), Decode: ms(2000), InputTokens: telemetry.Ptr(int64(rnd.Intn(400)))}
	}

	// Project 1: 3000 requests over 36 hours (two or three days), then
	// later versions and tombstones across the TTFT and E2E tops.
	const n = 3000
	rows := make([]telemetry.LLMRequest, n)
	for i := range rows {
		rows[i] = request(1, i, now.Add(-36*time.Hour+time.Duration(i)*43*time.Second+time.Duration(i)*7919))
	}
	// Two requests with the same service and start, both near the top.
	for i, ttft := range []float64{1500, 1400} {
		r := request(1, n+i, now.Add(-5*time.Hour))
		r.Service, r.TTFT, r.E2E = "chat", telemetry.Ptr(ttft), telemetry.Ptr(10*ttft)
		rows = append(rows, r)
	}
	insert(clickhouse.RequestsBatch(rows, nil, 1))
	byTTFT, byE2E := rankTTFTAndE2E(rows[:n])
	v2, edit := versionEditor(rows)
	var gone, v3 []telemetry.LLMRequest
	for k, i := range byTTFT[:150] {
		switch k % 7 {
		case 0: // moved down, out of the top
			edit(i, func(r *telemetry.LLMRequest) { r.TTFT = telemetry.Ptr(1 + float64(k)/1000) })
		case 1: // deleted
			gone = append(gone, rows[i])
		case 2: // now served by another model
			edit(i, func(r *telemetry.LLMRequest) { r.Model = "other" })
		case 3: // moved down in v2, back up (but lower) in v3, written twice
			edit(i, func(r *telemetry.LLMRequest) { r.TTFT = telemetry.Ptr(2.0) })
			r := rows[i]
			r.TTFT = telemetry.Ptr(*r.TTFT * 0.8)
			v3 = append(v3, r)
		}
	}
	for k, i := range byTTFT[2000:2010] { // moved up, into the top
		edit(i, func(r *telemetry.LLMRequest) { r.TTFT = telemetry.Ptr(1000 + float64(k)*3.7) })
	}
	for _, i := range byE2E[:25] { // moved down
		edit(i, func(r *telemetry.LLMRequest) { r.E2E = telemetry.Ptr(*r.E2E / 100) })
	}
	var v2Rows []telemetry.LLMRequest
	for _, r := range v2 {
		v2Rows = append(v2Rows, r)
	}
	insert(clickhouse.RequestsBatch(v2Rows, gone, 2))
	for range 2 {
		insert(clickhouse.RequestsBatch(v3, nil, 3))
	}

	// Project 2: the slowest requests of the 6 hours a window starts in
	// come before it and fill their state, so the window's own rows of
	// those 6 hours are not in it, though they rank above the page's last
	// rows from later hours: no page can be proven from the states.
	six := now.Truncate(analysis.TopStateSpan).Add(-36 * time.Hour)
	var edge []telemetry.LLMRequest
	add := func(n int, start func(i int) time.Time, ttft func(i int) float64) {
		for i := range n {
			r := request(2, len(edge), start(i))
			r.TTFT, r.E2E = telemetry.Ptr(ttft(i)), telemetry.Ptr(10*ttft(i))
			edge = append(edge, r)
		}
	}
	add(200, func(i int) time.Time { return six.Add(time.Duration(i) * 30 * time.Second) }, // its first 100 minutes
		func(i int) float64 { return 5000 + float64(i) })
	add(20, func(i int) time.Time { return six.Add(2*time.Hour + time.Duration(i)*time.Minute) }, // the window's, hidden
		func(i int) float64 { return 4000 + float64(i) })
	add(20, func(i int) time.Time { return six.Add(7*time.Hour + time.Duration(i)*time.Minute) }, // the window's slowest
		func(i int) float64 { return 7000 + float64(i) })
	add(2000, func(i int) time.Time { return six.Add(6*time.Hour + time.Duration(i)*time.Minute) }, // for 33 hours
		func(i int) float64 { return 1000 + float64(i) })
	insert(clickhouse.RequestsBatch(edge, nil, 1))

	// Project 3: the slowest requests have two different rows of one
	// version each; FINAL keeps the later written.
	var twin []telemetry.LLMRequest
	for i := range 500 {
		twin = append(twin, request(3, i, now.Add(-time.Duration(i)*time.Minute)))
	}
	insert(clickhouse.RequestsBatch(twin, nil, 1))
	for _, model := range []string{"large", "small"} {
		var rows []telemetry.LLMRequest
		for i := range 10 {
			r := request(3, 1000+i, now.Add(-time.Hour-time.Duration(i)*time.Second-time.Second/2))
			r.Model, r.TTFT, r.E2E = model, telemetry.Ptr(9000.0+float64(i)), telemetry.Ptr(90_000.0+float64(i))
			rows = append(rows, r)
		}
		insert(clickhouse.RequestsBatch(rows, nil, 1))
	}

	q := &analysis.Queries{CH: srv.CH}
	final := func(f analysis.RequestFilter) []telemetry.LLMRequest {
		t.Helper()
		where, args := "project_id = ? AND start >= ? AND start < ?", []any{f.Project, f.From, f.To}
		if f.Model != "" {
			where, args = where+" AND model = ?", append(args, f.Model)
		}
		r, err := srv.CH.Query(ctx, "SELECT "+clickhouse.RequestColumns+" FROM llm_requests FINAL WHERE "+where+
			" ORDER BY "+analysis.SortColumns[f.Sort]+" DESC NULLS LAST, start DESC LIMIT ? OFFSET ?"+analysis.FinalSettings,
			append(args, f.Limit, f.Offset)...)
		if err != nil {
			t.Fatal(err)
		}
		return clickhouse.ScanRequests(r)
	}
	type sortedPage struct {
		project       uint32
		from          time.Time
		sort          string
		limit, offset int
		model         string
		// states says whether the states must prove the page: "yes", "no",
		// "unmerged" (not while the versions are unmerged), "" (it hinges
		// on the churn they hold).
		states string
	}
	all := now.Add(-48 * time.Hour)
	cases := []sortedPage{
		{project: 1, from: all, sort: "ttft", limit: 10, states: "yes"},
		{project: 1, from: all, sort: "ttft", limit: 50, states: "yes"},
		{project: 1, from: all, sort: "ttft", limit: 20, offset: 30, states: "yes"},
		{project: 1, from: all, sort: "ttft", limit: 50, offset: 50},
		{project: 1, from: now.Add(-20 * time.Hour), sort: "ttft", limit: 50, states: "yes"},
		{project: 1, from: all, sort: "e2e", limit: 50, states: "yes"},
		{project: 1, from: all, sort: "e2e", limit: 20, offset: 40, states: "yes"},
		{project: 1, from: all, sort: "ttft", limit: 10, model: "other", states: "no"},     // the model's rows lie too deep
		{project: 1, from: all, sort: "ttft", limit: 50, offset: 100, states: "no"},        // 180 rows: more than the states hold
		{project: 1, from: now.Add(-6 * time.Hour), sort: "ttft", limit: 10, states: "no"}, // too short a window
		{project: 1, from: all, sort: "queue", limit: 10, states: "no"},                    // no states
		{project: 2, from: six.Add(2 * time.Hour), sort: "ttft", limit: 60, states: "no"},
		{project: 2, from: six.Add(2 * time.Hour), sort: "e2e", limit: 60, states: "no"},
		{project: 2, from: six, sort: "ttft", limit: 60, states: "yes"},
		{project: 3, from: all, sort: "ttft", limit: 50, states: "unmerged"},
		{project: 3, from: all, sort: "e2e", limit: 50, states: "unmerged"},
	}
	check := func(stage string, merged bool) {
		t.Helper()
		for _, c := range cases {
			name := fmt.Sprintf("%s: project %d from %s %s limit %d offset %d model %q", stage, c.project, c.from.Format(time.TimeOnly),
				c.sort, c.limit, c.offset, c.model)
			f := analysis.RequestFilter{Project: c.project, From: c.from, To: now.Add(time.Minute), Sort: c.sort, Desc: true,
				Limit: c.limit, Offset: c.offset, Model: c.model, NoTotal: true}
			want := final(f)
			if len(want) != c.limit {
				t.Fatalf("%s: FINAL lists %d rows", name, len(want))
			}
			got, found, err := q.TopFromStates(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if want := c.states == "yes"; (c.states == "yes" || c.states == "no" || c.states == "unmerged" && !merged) && found != want {
				t.Errorf("%s: the states proved a page: %v, want %v", name, found, want)
			}
			if found {
				if diff := firstDiff(got, want); diff != "" {
					t.Errorf("%s: the states' page differs from FINAL: %s", name, diff)
				}
			}
			if got, _, err = q.Requests(ctx, f); err != nil {
				t.Fatal(err)
			} else if diff := firstDiff(got, want); diff != "" {
				t.Errorf("%s: Requests differs from FINAL: %s", name, diff)
			}
		}
	}
	check("unmerged", false)
	// Merges drop the replaced versions from llm_requests; the states keep
	// them.
	if err := srv.CH.Exec(ctx, "SYSTEM START MERGES llm_requests"); err != nil {
		t.Fatal(err)
	}
	if err := srv.CH.Exec(ctx, "OPTIMIZE TABLE llm_requests FINAL"); err != nil {
		t.Fatal(err)
	}
	check("merged", true)
	// The migration fills the states from the stored rows, once however
	// often it runs.
	for range 2 {
		if err := srv.CH.Exec(ctx, "DELETE FROM schema_migrations WHERE version = '0012_llm_request_top'"); err != nil {
			t.Fatal(err)
		}
		if err := srv.CH.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("migrated", true)
}

// rankTTFTAndE2E lists row indexes by TTFT and by E2E, highest first.
func rankTTFTAndE2E(rows []telemetry.LLMRequest) (byTTFT, byE2E []int) {
	rank := func(value func(*telemetry.LLMRequest) float64) []int {
		idx := make([]int, len(rows))
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool { return value(&rows[idx[a]]) > value(&rows[idx[b]]) })
		return idx
	}
	return rank(func(r *telemetry.LLMRequest) float64 { return *r.TTFT }), rank(func(r *telemetry.LLMRequest) float64 { return *r.E2E })
}

// versionEditor collects a second version of rows: edit changes row i's
// (starting from rows[i], or from its earlier edits).
func versionEditor(rows []telemetry.LLMRequest) (map[int]telemetry.LLMRequest, func(i int, change func(*telemetry.LLMRequest))) {
	v2 := map[int]telemetry.LLMRequest{}
	return v2, func(i int, change func(*telemetry.LLMRequest)) {
		r, ok := v2[i]
		if !ok {
			r = rows[i]
		}
		change(&r)
		v2[i] = r
	}
}
