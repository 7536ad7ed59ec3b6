package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenpath/tokenpath/ingest/normalize"
	"github.com/tokenpath/tokenpath/outbound"
)

// Scrape defaults, as in Prometheus.
const (
	DefaultScrapeInterval = 15 * time.Second
	DefaultScrapeTimeout  = 10 * time.Second
	// DefaultScrapeMaxBody bounds one /metrics response after decompression;
	// an inference server's page is tens of kilobytes.
	DefaultScrapeMaxBody = 32 << 20
	// DefaultScrapeReload is how often the scrape_targets table is re-read.
	DefaultScrapeReload = 30 * time.Second
	// StaticTargetsProject names the project TOKENPATH_SCRAPE_TARGETS feed.
	StaticTargetsProject = "default"
)

// scrapeAccept asks for the text format normalize.Prometheus reads; the
// protobuf exposition some servers prefer is not among the choices.
const scrapeAccept = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"

// ScrapeTarget is one Prometheus /metrics endpoint of an inference server.
type ScrapeTarget struct {
	ID        int64 // scrape_targets row; 0 for a TOKENPATH_SCRAPE_TARGETS entry
	ProjectID uint32
	URL       string
	Service   string            // "" = the URL's host name
	Labels    map[string]string // added to every point; they win over scraped labels
	Interval  time.Duration     // 0 = DefaultScrapeInterval
	Timeout   time.Duration     // 0 = DefaultScrapeTimeout; never above Interval
}

// TargetStatus is the outcome of a target's last scrape, for the settings
// page. Up reports the target; LastError may also name a problem storing the
// points while Up is true.
type TargetStatus struct {
	ProjectID  uint32
	URL        string // credentials removed
	Service    string
	Up         bool
	LastScrape time.Time // zero until the first scrape finished
	LastError  string
	Duration   time.Duration
}

// ScrapeTargetStore is where configured targets live and scrape outcomes are
// recorded (PostgreSQL's scrape_targets table in the server).
type ScrapeTargetStore interface {
	// ProjectID resolves a project name (for TOKENPATH_SCRAPE_TARGETS).
	ProjectID(ctx context.Context, name string) (int64, error)
	ScrapeTargets(ctx context.Context) ([]ScrapeTarget, error)
	RecordScrape(ctx context.Context, id int64, at time.Time, up bool, lastError string) error
}

// Scraper pulls /metrics from inference servers (vLLM, SGLang, TGI) and
// submits the points through the Receiver, durable like any export. Targets
// come from TOKENPATH_SCRAPE_TARGETS and the scrape_targets table, re-read
// every ReloadEvery or when Reload is called.
type Scraper struct {
	Receiver *Receiver
	Store    ScrapeTargetStore // nil: only Static targets, in project 1
	// Static are TOKENPATH_SCRAPE_TARGETS entries: "URL" or "service=URL".
	Static       []string
	Client       *http.Client
	MaxBodyBytes int64
	ReloadEvery  time.Duration
	Log          *slog.Logger

	mu     sync.Mutex
	loops  map[targetKey]*targetLoop
	status map[targetKey]*TargetStatus
	kick   chan struct{}
	wg     sync.WaitGroup
}

// targetKey identifies a target: scraping one URL twice for one project
// would double every counter.
type targetKey struct {
	project uint32
	url     string
}

type targetLoop struct {
	target scrapeJob
	cancel context.CancelFunc
}

// scrapeJob is a validated target with defaults filled in.
type scrapeJob struct {
	ScrapeTarget
	instance string
	redacted string
	// name identifies the target in self-metrics and logs without its URL,
	// which may carry a password, a token in the query or an internal
	// host: the table row's id, or static-N for the Nth static entry.
	name string
}

// upLabels are the tokenpath_scrape_up labels of a job.
func (j scrapeJob) upLabels() prometheus.Labels {
	return prometheus.Labels{"project": strconv.FormatUint(uint64(j.ProjectID), 10), "service": j.Service, "target": j.name}
}

// NewScraper returns a scraper with the defaults filled in.
func NewScraper(recv *Receiver, store ScrapeTargetStore, static []string, log *slog.Logger) *Scraper {
	return &Scraper{Receiver: recv, Store: store, Static: static, Log: log}
}

func (s *Scraper) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loops == nil {
		s.loops = map[targetKey]*targetLoop{}
		s.status = map[targetKey]*TargetStatus{}
		s.kick = make(chan struct{}, 1)
	}
	if s.Client == nil {
		// Timeouts come per request from the target's timeout.
		s.Client = &http.Client{}
	}
	if s.MaxBodyBytes <= 0 {
		s.MaxBodyBytes = DefaultScrapeMaxBody
	}
	if s.ReloadEvery <= 0 {
		s.ReloadEvery = DefaultScrapeReload
	}
	if s.Log == nil {
		s.Log = slog.Default()
	}
}

// Reload re-reads the targets now instead of at the next ReloadEvery tick
// (after a target was added in the UI). It does not wait.
func (s *Scraper) Reload() {
	s.init()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run scrapes until ctx is done.
func (s *Scraper) Run(ctx context.Context) {
	s.init()
	defer func() {
		s.mu.Lock()
		for _, l := range s.loops {
			l.cancel()
		}
		s.mu.Unlock()
		s.wg.Wait()
	}()
	t := time.NewTicker(s.ReloadEvery)
	defer t.Stop()
	for {
		s.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// Status lists every configured target with its last outcome, sorted by URL.
func (s *Scraper) Status() []TargetStatus {
	s.init()
	s.mu.Lock()
	out := make([]TargetStatus, 0, len(s.status))
	for _, st := range s.status {
		out = append(out, *st)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].URL != out[j].URL {
			return out[i].URL < out[j].URL
		}
		return out[i].ProjectID < out[j].ProjectID
	})
	return out
}

// sync reconciles the running loops with the configured targets.
func (s *Scraper) sync(ctx context.Context) {
	jobs, invalid := s.targets(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, l := range s.loops {
		if j, ok := jobs[k]; !ok || !sameJob(j, l.target) {
			l.cancel()
			delete(s.loops, k)
			s.Receiver.Pipeline.Metrics.ScrapeUp.Delete(l.target.upLabels())
			if !ok {
				delete(s.status, k)
			}
		}
	}
	for k := range s.status {
		if _, ok := jobs[k]; !ok {
			delete(s.status, k)
		}
	}
	for k, st := range invalid {
		s.status[k] = st
	}
	for k, j := range jobs {
		if _, running := s.loops[k]; running {
			continue
		}
		if st, ok := s.status[k]; !ok || st.Service != j.Service {
			s.status[k] = &TargetStatus{ProjectID: j.ProjectID, URL: j.redacted, Service: j.Service}
		}
		lctx, cancel := context.WithCancel(ctx)
		s.loops[k] = &targetLoop{target: j, cancel: cancel}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.loop(lctx, j)
		}()
	}
}

// targets gathers the static and table targets; a table row wins over a
// static entry for the same URL. Entries that cannot be scraped are
// returned as statuses carrying the reason.
func (s *Scraper) targets(ctx context.Context) (map[targetKey]scrapeJob, map[targetKey]*TargetStatus) {
	jobs := map[targetKey]scrapeJob{}
	invalid := map[targetKey]*TargetStatus{}
	add := func(t ScrapeTarget, name string) {
		j, err := newScrapeJob(t)
		j.name = name
		k := targetKey{t.ProjectID, j.redacted}
		if err != nil {
			invalid[k] = &TargetStatus{ProjectID: t.ProjectID, URL: j.redacted, Service: t.Service, LastError: err.Error()}
			return
		}
		jobs[k] = j
	}
	if len(s.Static) > 0 {
		project, err := s.staticProject(ctx)
		for i, entry := range s.Static {
			t := ParseStaticTarget(entry)
			t.ProjectID = project
			if err != nil {
				j, _ := newScrapeJob(t)
				invalid[targetKey{0, j.redacted}] = &TargetStatus{URL: j.redacted, Service: t.Service, LastError: err.Error()}
				continue
			}
			add(t, "static-"+strconv.Itoa(i))
		}
	}
	if s.Store != nil {
		rows, err := s.Store.ScrapeTargets(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.Log.Warn("cannot read scrape targets; keeping the current ones", "err", err)
			}
			// Keep the table targets already running rather than stopping
			// them because PostgreSQL blinked.
			s.mu.Lock()
			for k, l := range s.loops {
				if l.target.ID != 0 {
					jobs[k] = l.target
				}
			}
			s.mu.Unlock()
		}
		for _, t := range rows {
			add(t, strconv.FormatInt(t.ID, 10))
		}
	}
	return jobs, invalid
}

func (s *Scraper) staticProject(ctx context.Context) (uint32, error) {
	if s.Store == nil {
		return 1, nil
	}
	id, err := s.Store.ProjectID(ctx, StaticTargetsProject)
	if err != nil {
		return 0, fmt.Errorf("TOKENPATH_SCRAPE_TARGETS feed project %q: %w", StaticTargetsProject, err)
	}
	return uint32(id), nil
}

// ParseStaticTarget reads one TOKENPATH_SCRAPE_TARGETS entry: "URL" or
// "service=URL". A URL's own query may hold '=', so the part before the
// first '=' is a service name only when it looks like one.
func ParseStaticTarget(entry string) ScrapeTarget {
	entry = strings.TrimSpace(entry)
	if i := strings.IndexByte(entry, '='); i > 0 && !strings.ContainsAny(entry[:i], ":/?") {
		return ScrapeTarget{Service: strings.TrimSpace(entry[:i]), URL: strings.TrimSpace(entry[i+1:])}
	}
	return ScrapeTarget{URL: entry}
}

// newScrapeJob validates t and fills defaults: instance = host:port,
// service = the host name, path /metrics when none is given.
func newScrapeJob(t ScrapeTarget) (scrapeJob, error) {
	j := scrapeJob{ScrapeTarget: t, redacted: redactRaw(t.URL)}
	u, err := url.Parse(t.URL)
	if err != nil {
		// url.Parse's error quotes the URL, password included.
		return j, errors.New("not a valid URL")
	}
	j.redacted = u.Redacted()
	if u.Scheme != "http" && u.Scheme != "https" {
		return j, fmt.Errorf("only http and https URLs can be scraped, not %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return j, errors.New("the URL has no host")
	}
	if u.Path == "" {
		u.Path = "/metrics"
	}
	j.URL, j.redacted = u.String(), u.Redacted()
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	j.instance = net.JoinHostPort(u.Hostname(), port)
	if j.Service == "" {
		j.Service = u.Hostname()
	}
	if j.Interval <= 0 {
		j.Interval = DefaultScrapeInterval
	}
	if j.Timeout <= 0 {
		j.Timeout = DefaultScrapeTimeout
	}
	j.Timeout = min(j.Timeout, j.Interval)
	return j, nil
}

// redactRaw hides the user info of a URL that url.Parse refused.
func redactRaw(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		return scheme + "://xxxxx@" + rest[at+1:]
	}
	return raw
}

func sameJob(a, b scrapeJob) bool {
	if a.ID != b.ID || a.URL != b.URL || a.Service != b.Service || a.Interval != b.Interval || a.Timeout != b.Timeout || len(a.Labels) != len(b.Labels) {
		return false
	}
	for k, v := range a.Labels {
		if bv, ok := b.Labels[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// loop scrapes at once, then every interval.
func (s *Scraper) loop(ctx context.Context, j scrapeJob) {
	t := time.NewTicker(j.Interval)
	defer t.Stop()
	for {
		s.scrapeAndRecord(ctx, j)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Scraper) scrapeAndRecord(ctx context.Context, j scrapeJob) {
	start := time.Now()
	scraped, err := s.scrape(ctx, j, start)
	points := scraped.Points
	if ctx.Err() != nil {
		return // stopping or reconfigured: not the target's fault
	}
	took := time.Since(start)
	up := err == nil
	var msg string
	var detail error
	if err != nil {
		msg = err.Error()
		var se scrapeError
		if errors.As(err, &se) {
			detail = se.detail
		}
	} else if err := s.Receiver.SubmitScrape(ctx, j.ProjectID, scraped); err != nil {
		msg = fmt.Sprintf("scraped %d points but could not store them: %v", len(points), err)
	} else {
		s.Receiver.Pipeline.Metrics.Accepted.WithLabelValues("metrics", "scrape").Add(float64(len(points)))
	}
	if up {
		s.Receiver.Pipeline.Metrics.ScrapeUp.With(j.upLabels()).Set(1)
	} else {
		s.Receiver.Pipeline.Metrics.ScrapeUp.With(j.upLabels()).Set(0)
		s.Log.Debug("scrape failed", "target", j.name, "service", j.Service, "err", msg, "detail", detail)
	}
	s.mu.Lock()
	k := targetKey{j.ProjectID, j.redacted}
	if l, ok := s.loops[k]; ok && sameJob(l.target, j) {
		s.status[k] = &TargetStatus{ProjectID: j.ProjectID, URL: j.redacted, Service: j.Service, Up: up,
			LastScrape: start, LastError: msg, Duration: took}
	}
	s.mu.Unlock()
	if j.ID != 0 && s.Store != nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := s.Store.RecordScrape(rctx, j.ID, start, up, msg); err != nil && ctx.Err() == nil {
			s.Log.Warn("cannot record scrape outcome", "target", j.name, "service", j.Service, "err", err)
		}
		cancel()
	}
}

// scrapeError is a failed scrape as the settings page, the scrape_targets
// row and logs above debug show it: a class of failure that echoes
// neither the URL (a password or token in its query) nor the target's
// reply, so a target cannot be used to read or map internal services
// (TestScrapeErrorsEchoNoReply). detail, for the debug log, names the
// cause without the URL.
type scrapeError struct {
	class  string
	detail error
}

func (e scrapeError) Error() string { return e.class }

// errBodyTooLarge is returned by cappedReader past its limit.
var errBodyTooLarge = errors.New("response too large")

// cappedReader fails once more than n bytes were read, so an oversized page
// is refused instead of silently cut.
type cappedReader struct {
	r io.Reader
	n int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.n < 0 {
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > c.n+1 {
		p = p[:c.n+1]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	if c.n < 0 {
		return n, errBodyTooLarge
	}
	return n, err
}

// scrape fetches and parses one target; start becomes the points' time.
func (s *Scraper) scrape(ctx context.Context, j scrapeJob, start time.Time) (normalize.Exposition, error) {
	var none normalize.Exposition
	ctx, cancel := context.WithTimeout(ctx, j.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.URL, nil)
	if err != nil {
		return none, scrapeError{"not a valid URL", nil}
	}
	req.Header.Set("Accept", scrapeAccept)
	req.Header.Set("User-Agent", "tokenpath-scraper")
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", strconv.FormatFloat(j.Timeout.Seconds(), 'f', -1, 64))
	resp, err := s.Client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return none, fmt.Errorf("no answer within the %s scrape timeout", j.Timeout)
		}
		// The client's error quotes the URL, query included; the detail
		// keeps only the cause (dial, TLS) for the debug log.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, outbound.ErrNotAllowed) {
			return none, scrapeError{"the host is not on the outbound allow-list (TOKENPATH_OUTBOUND_ALLOW)", err}
		}
		return none, scrapeError{"cannot reach the target", err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
		return none, scrapeError{fmt.Sprintf("the target answered HTTP %dxx", resp.StatusCode/100), fmt.Errorf("HTTP %s", resp.Status)}
	}
	// The transport undoes gzip itself, so the cap holds after decompression.
	body := &cappedReader{r: resp.Body, n: s.MaxBodyBytes}
	e, err := normalize.PrometheusExposition(j.ProjectID, body, resp.Header.Get("Content-Type"), start, j.Service, j.instance)
	if body.n < 0 {
		return none, fmt.Errorf("response larger than %d bytes", s.MaxBodyBytes)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return none, fmt.Errorf("no complete answer within the %s scrape timeout", j.Timeout)
		}
		return none, scrapeError{"the answer is not a Prometheus text exposition", err}
	}
	for i := range e.Points {
		e.Points[i].Labels = withTargetLabels(e.Points[i].Labels, j.Labels)
	}
	for i := range e.Histograms {
		e.Histograms[i].Labels = withTargetLabels(e.Histograms[i].Labels, j.Labels)
	}
	return e, nil
}

// withTargetLabels adds the target's labels; a scraped label of the same
// name is kept as exported_<name>, as Prometheus does.
func withTargetLabels(scraped, target map[string]string) map[string]string {
	if len(target) == 0 {
		return scraped
	}
	if scraped == nil {
		scraped = make(map[string]string, len(target))
	}
	for k, v := range target {
		if old, ok := scraped[k]; ok && old != v {
			scraped["exported_"+k] = old
		}
		scraped[k] = v
	}
	return scraped
}
