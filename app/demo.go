package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/demo"
)

// StartDemo runs the demo traffic generator against this server's own OTLP
// endpoint until the server stops, with the bootstrap key or a key it
// creates, and returns that key. The demo continues the demo traffic the
// store already holds (demoResume).
func (a *App) StartDemo(ctx context.Context) (string, error) {
	if a.OTLPHTTPAddr == "" {
		return "", errors.New("--demo needs the OTLP/HTTP receiver (TOKENPATH_OTLP_HTTP_ADDR)")
	}
	key, err := a.demoKey(ctx)
	if err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	ui := "http://" + loopback(a.HTTPAddr)
	project, err := a.PG.ProjectForKey(ctx, key)
	if err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	resume, err := a.demoResume(ctx, project)
	if err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	a.workers.Add(1)
	go func() {
		defer a.workers.Done()
		cfg := demo.Config{OTLPEndpoint: "http://" + loopback(a.OTLPHTTPAddr), APIBase: ui, APIKey: key, Resume: resume,
			ScrapeTarget: a.demoScrapeTarget(project), Log: a.Log}
		err := demo.Run(a.demoCtx, cfg, a.Config.DemoBackfill)
		if err != nil && a.demoCtx.Err() == nil {
			a.Log.Error("demo traffic stopped", "err", err)
		}
	}()
	return key, nil
}

// demoKey is the bootstrap key when set, else a key created once and kept
// in the data dir (0600) so restarts of `make run` reuse it.
func (a *App) demoKey(ctx context.Context) (string, error) {
	if a.Config.BootstrapKey != "" {
		return a.Config.BootstrapKey, nil
	}
	path := filepath.Join(a.Config.DataDir, "demo-key")
	if b, err := os.ReadFile(path); err == nil {
		if _, err := a.PG.ProjectForKey(ctx, strings.TrimSpace(string(b))); err == nil {
			return strings.TrimSpace(string(b)), nil
		}
	}
	project, err := a.PG.EnsureProject(ctx, "default")
	if err != nil {
		return "", err
	}
	key, err := a.PG.CreateKey(ctx, project, "demo")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("save demo key: %w", err)
	}
	return key, nil
}

// demoResume is the end of the newest demo span the store holds for the
// project (zero when there is none), so a restarted demo continues
// from there instead of sending its history again. It reads the spans,
// not the assembled requests, which lag behind them.
func (a *App) demoResume(ctx context.Context, project int64) (time.Time, error) {
	// Older than the longest backfill the setting allows would not change
	// where the backfill starts; the bound keeps the read to recent parts.
	since := time.Now().Add(-max(a.Config.DemoBackfill, time.Hour))
	r, err := a.CH.Query(ctx, `SELECT max(end_time) AS newest, count() AS spans FROM spans
		WHERE project_id = ? AND start >= ? AND service IN ?`, uint32(project), since, demo.Services)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the newest demo traffic: %w", err)
	}
	if r.Len() == 0 || r.Row(0).Int("spans") == 0 {
		return time.Time{}, nil
	}
	return r.Row(0).Time("newest"), nil
}

// demoScrapeTarget registers the demo's metrics-only vLLM with the
// built-in scraper: the project's one target for service at url, scraped
// every interval; an empty url removes it. Only loopback targets of that
// service are replaced, the ones an earlier demo run left (its server's
// port is gone with it), never a target someone added by hand.
func (a *App) demoScrapeTarget(project int64) func(ctx context.Context, url, service string, interval time.Duration) error {
	return func(ctx context.Context, url, service string, interval time.Duration) error {
		targets, err := a.PG.ListTargets(ctx, project)
		if err != nil {
			return err
		}
		current := false
		for _, t := range targets {
			if t.Service != service || !strings.HasPrefix(t.URL, "http://127.0.0.1:") {
				continue
			}
			if url != "" && t.URL == url && t.Interval == interval {
				current = true
				continue
			}
			if err := a.PG.DeleteTarget(ctx, project, t.ID); err != nil {
				return err
			}
		}
		if url != "" && !current {
			if _, err := a.PG.CreateTarget(ctx, project, url, service, interval); err != nil {
				return err
			}
		}
		a.Scraper.Reload()
		return nil
	}
}
