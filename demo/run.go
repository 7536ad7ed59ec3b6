package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Live pacing: how often the simulation catches up with the wall clock and
// ships what finished.
const (
	liveTick = 2 * time.Second
	// scheduleAhead: live phases are planned this far ahead of now.
	scheduleAhead = time.Hour
)

// Run backfills the last backfill of traffic (or only what followed
// cfg.Resume), with one planted incident of each kind spread over it
// (PlannedBackfill), then generates live traffic in
// real time with the rotating incident schedule (LivePhases) until ctx is
// done. Both run on one continuous simulation, so the queue, the replicas
// and the autoscaler carry over from history into live traffic. It waits
// for the server to accept connections before the first export. A batch
// the server does not take within the retry budget is logged and dropped:
// the demo must not stop because the server restarted. Run returns nil
// when ctx is cancelled.
func Run(ctx context.Context, cfg Config, backfill time.Duration) error {
	cfg = cfg.withDefaults()
	log := cfg.Log
	snd, err := newSender(ctx, cfg)
	if err != nil {
		return err
	}
	defer snd.close()
	if err := waitForServer(ctx, cfg); err != nil {
		return ignoreCancel(err)
	}
	now := time.Now().Truncate(time.Millisecond)
	if cfg.Seed == 0 {
		// Trace ids come from the seed; a restart must not resend ids the
		// store already holds (it dedupes by trace and span id).
		cfg.Seed = now.UnixNano()
	}
	from := backfillFrom(now, backfill, cfg.Resume)
	backfill = now.Sub(from)
	if !cfg.Resume.IsZero() && backfill > 0 {
		log.Info("demo: continuing the stored demo traffic", "newest", cfg.Resume.Format(time.RFC3339), "gap", shortDuration(backfill))
	}
	phases := PlannedBackfill(from, now)
	planned := 0
	live := LivePhases(now, now.Add(scheduleAhead), planned)
	planned += len(live)
	s := newSim(cfg, from, append(phases, live...))
	metricsOnly, err := startMetricsOnly(ctx, cfg, s, now)
	if err != nil {
		return ignoreCancel(err)
	}
	if metricsOnly != nil {
		defer metricsOnly.stop()
	}

	ship := func(out *Scenario) error {
		if out.empty() {
			return nil
		}
		err := snd.send(ctx, out)
		if err != nil && ctx.Err() == nil {
			log.Warn("demo: the server did not take all of a batch", "spans", len(out.Spans), "metric_points", len(out.Metrics), "err", err)
			return nil
		}
		return err
	}

	if backfill > 0 {
		log.Info(fmt.Sprintf("backfilling %s of demo traffic", shortDuration(backfill)), "from", from.Format(time.RFC3339), "incidents", len(phases))
		t0 := time.Now()
		var spans, points, events, lastPct int
		// Chunks of 1/20 of the window (at least a minute) keep memory flat
		// and the export requests full.
		chunk := max(backfill/20, time.Minute)
		for t := from; t.Before(now); {
			if t = t.Add(chunk); t.After(now) {
				t = now
			}
			s.advance(t)
			out := s.take()
			spans, points, events = spans+len(out.Spans), points+len(out.Metrics), events+len(out.Events)
			if err := ship(out); err != nil {
				return ignoreCancel(err)
			}
			if pct := int(100 * t.Sub(from) / now.Sub(from)); pct/10 > lastPct/10 {
				lastPct = pct
				log.Info(fmt.Sprintf("backfilling %s of demo traffic: %d %%", shortDuration(backfill), pct))
			}
		}
		log.Info("demo backfill sent", "spans", spans, "metric_points", points, "events", events,
			"took", time.Since(t0).Round(time.Millisecond))
	}

	if metricsOnly != nil {
		metricsOnly.server.historyDone()
	}
	log.Info("demo: live traffic started", "rate", cfg.Rate, "next_incident", live[0].Incident, "at", live[0].From.Format(time.RFC3339))
	tick := time.NewTicker(liveTick)
	defer tick.Stop()
	current := Healthy
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		t := time.Now()
		if last := s.phases[len(s.phases)-1]; last.To.Before(t.Add(scheduleAhead)) {
			more := LivePhases(last.To, t.Add(2*scheduleAhead), planned)
			planned += len(more)
			s.phases = append(s.phases, more...)
			// Past phases no longer matter (requests take minutes at most).
			for len(s.phases) > 1 && s.phases[0].To.Before(t.Add(-time.Hour)) {
				s.phases = s.phases[1:]
			}
		}
		if inc := IncidentAt(s.phases, t); inc != current {
			log.Info("demo: incident "+string(inc)+" now", "previous", current)
			current = inc
		}
		s.advance(t)
		if err := ship(s.take()); err != nil {
			return ignoreCancel(err)
		}
		if metricsOnly != nil {
			if err := ship(metricsOnly.replayed(ctx)); err != nil {
				return ignoreCancel(err)
			}
		}
	}
}

// backfillFrom is where the backfill starts: backfill before now, or the
// end of the stored demo traffic (resume) when that is later, so a restart
// fills only the gap and never sends a span older than what the store
// holds (TestDemoContinuesWhereItStopped). A resume time in the future
// (a clock step back) sends no history.
func backfillFrom(now time.Time, backfill time.Duration, resume time.Time) time.Time {
	from := now.Add(-max(backfill, 0))
	if resume.After(now) {
		return now
	}
	if resume.After(from) {
		from = resume
	}
	return from
}

// waitForServer returns once the OTLP endpoint accepts connections. The
// exporters retry what a server answers (429, 503 …), not a refused
// connection, and `tokenpath demo` may start before the server does.
func waitForServer(ctx context.Context, cfg Config) error {
	u, err := url.Parse(cfg.OTLPEndpoint)
	if err != nil || u.Host == "" {
		return fmt.Errorf("OTLP endpoint %q is not a URL", cfg.OTLPEndpoint)
	}
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	var dialer net.Dialer
	delay := retryInitial
	for logged := false; ; logged = true {
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		if !logged {
			cfg.Log.Info("demo: waiting for the server", "otlp_endpoint", cfg.OTLPEndpoint, "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 2*time.Second) // a starting server is up in seconds
	}
}

// shortDuration prints 1h0m0s as 1h and 90s as 1m30s.
func shortDuration(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func ignoreCancel(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}
