package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// defaultPageEvery is how often the bench reads a page while it loads the
// server: an engineer looking at the diagnosis during an incident, which
// is when ingest peaks. Each read is one statement or a few on the
// engine, so the pace costs the ingest little.
const defaultPageEvery = 5 * time.Second

// pageReads are the API reads a page makes, over the last 15 minutes
// (what a diagnosis link in an incident channel covers), in turn.
var pageReads = []string{"/api/v1/requests?limit=50", "/api/v1/diagnose"}

// pageTimes is how long the page reads took, by read (a pageReads
// entry), apart for while the exports were sent (Phase) and after (After:
// the backlog draining and the assembler catching up).
type pageTimes struct {
	Phase, After map[string][]time.Duration
	Failed       int
	FirstError   string
}

// reads is how many reads were timed.
func (p pageTimes) reads() int {
	n := 0
	for _, m := range []map[string][]time.Duration{p.Phase, p.After} {
		for _, ds := range m {
			n += len(ds)
		}
	}
	return n
}

func (p pageTimes) describe() string {
	part := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "none"
		}
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return fmt.Sprintf("p50 %s, p90 %s, max %s (%d)", ms(s[len(s)/2]), ms(s[len(s)*9/10]), ms(s[len(s)-1]), len(s))
	}
	var out []string
	for _, path := range pageReads {
		name := strings.TrimPrefix(strings.SplitN(path, "?", 2)[0], "/api/v1/")
		out = append(out, fmt.Sprintf("%s in the phase %s, after it %s", name, part(p.Phase[path]), part(p.After[path])))
	}
	if p.Failed > 0 {
		out = append(out, fmt.Sprintf("%d failed (first: %s)", p.Failed, p.FirstError))
	}
	return strings.Join(out, "; ")
}

// pageReader reads pages every so often until stopped, one at a time (a
// person waits for each).
type pageReader struct {
	mu    sync.Mutex
	times pageTimes
	after bool
	stop  chan struct{}
	done  chan struct{}
}

func startPageReader(ctx context.Context, web string, every time.Duration) *pageReader {
	r := &pageReader{stop: make(chan struct{}), done: make(chan struct{}),
		times: pageTimes{Phase: map[string][]time.Duration{}, After: map[string][]time.Duration{}}}
	client := &http.Client{Timeout: time.Minute}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-r.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			path := pageReads[i%len(pageReads)]
			d, err := readPage(ctx, client, web, path)
			r.note(path, d, err)
		}
	}()
	return r
}

func (r *pageReader) note(path string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil:
		r.times.Failed++
		if r.times.FirstError == "" {
			r.times.FirstError = err.Error()
		}
	case r.after:
		r.times.After[path] = append(r.times.After[path], d)
	default:
		r.times.Phase[path] = append(r.times.Phase[path], d)
	}
}

// phaseOver counts later reads as after the phase.
func (r *pageReader) phaseOver() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.after = true
}

func (r *pageReader) finish() pageTimes {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.times
}

// readPage GETs one API read over the last 15 minutes and returns how long
// the whole answer took.
func readPage(ctx context.Context, client *http.Client, web, path string) (time.Duration, error) {
	now := time.Now().UTC()
	q := url.Values{"from": {now.Add(-15 * time.Minute).Format(time.RFC3339)}, "to": {now.Format(time.RFC3339)}}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+web+path+sep+q.Encode(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+benchKey)
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: HTTP %d: %.200s", path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return d, nil
}
