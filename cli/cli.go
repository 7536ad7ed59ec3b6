// Package cli implements the tokenpath command line: `tokenpath diagnose`
// prints the diagnosis API's answer for people who live in a shell during
// incidents, and `tokenpath demo` generates demo traffic.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
)

// Env is the process environment the commands read (for tests).
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	HTTP           *http.Client
}

// Diagnose runs `tokenpath diagnose`.
func Diagnose(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("tokenpath diagnose", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	server := fs.String("server", firstNonEmpty(env.Getenv("TOKENPATH_URL"), "http://localhost:8080"), "Tokenpath URL (TOKENPATH_URL)")
	key := fs.String("key", defaultKey(env), keyUsage)
	service := fs.String("service", "", "service to diagnose (calling app or inference server)")
	model := fs.String("model", "", "model to diagnose")
	last := fs.String("last", "15m", "window ending now, e.g. 15m, 1h, 2d")
	from := fs.String("from", "", "window start, RFC 3339 (instead of --last)")
	to := fs.String("to", "", "window end, RFC 3339")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "Usage: tokenpath diagnose --service NAME [--model M] [--last 15m | --from T --to T] [--json]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *key == "" {
		return errNoKey
	}
	q := url.Values{}
	for k, v := range map[string]string{"service": *service, "model": *model, "from": *from, "to": *to} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *from == "" {
		q.Set("last", *last)
	}
	body, err := get(ctx, env, strings.TrimRight(*server, "/")+"/api/v1/diagnose?"+q.Encode(), *key)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := env.Stdout.Write(append(body, '\n'))
		return err
	}
	var d diagnose.Diagnosis
	if err := json.Unmarshal(body, &d); err != nil {
		return fmt.Errorf("unexpected answer from %s: %w", *server, err)
	}
	PrintDiagnosis(env.Stdout, d, *service)
	return nil
}

func get(ctx context.Context, env Env, u, key string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	client := env.HTTP
	if client == nil {
		client = &http.Client{Timeout: 60 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Tokenpath: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		if e.Error == "" {
			e.Error = strings.TrimSpace(string(body))
		}
		return nil, fmt.Errorf("%s: %s", resp.Status, e.Error)
	}
	return body, nil
}

// PrintDiagnosis renders a diagnosis for a terminal: verdict, evidence,
// component table.
func PrintDiagnosis(w io.Writer, d diagnose.Diagnosis, service string) {
	title := "all services"
	if service != "" {
		title = service
	}
	about := ""
	if d.RequestsEstimated {
		about = "about "
	}
	sample := ""
	if d.AnalyzedRequests > 0 && d.AnalyzedRequests < d.Requests {
		// Percentiles and evidence read a uniform sample of a busy window.
		sample = fmt.Sprintf("; figures from a sample of %d", d.AnalyzedRequests)
	}
	if d.BaselineDataFrom != nil {
		// A thin baseline: data starts well inside it.
		sample += "; the baseline's requests start at " + d.BaselineDataFrom.UTC().Format("15:04:05")
	}
	fmt.Fprintf(w, "%s  %s → %s UTC  (%s%d requests, baseline %s%d%s)\n\n", title,
		d.Window.From.UTC().Format("2006-01-02 15:04"), d.Window.To.UTC().Format("15:04"), about, d.Requests, about, d.BaselineRequests, sample)
	fmt.Fprintf(w, "VERDICT  %s  (confidence %.0f %%)\n%s\n\n", strings.ToUpper(strings.ReplaceAll(string(d.Verdict), "_", " ")), d.Confidence*100, d.Summary)
	if len(d.Evidence) > 0 {
		fmt.Fprintln(w, "EVIDENCE")
		for _, e := range d.Evidence {
			fmt.Fprintf(w, "  %d. %s\n", e.N, e.Text)
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "COMPONENT\tp50\tp95\tp99\tbaseline p95\t")
	order := []string{"ttft", "pre_inference", "queue", "prefill", "network", "cold_start_wait", "decode", "e2e", "itl"}
	seen := map[string]bool{}
	names := []string{}
	for _, n := range order {
		if _, ok := d.Components[n]; ok {
			names = append(names, n)
			seen[n] = true
		}
	}
	var rest []string
	for n := range d.Components {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	for _, n := range append(names, rest...) {
		c := d.Components[n]
		if c.Count == 0 && c.BaselineCount == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", n, ms(c.P50), ms(c.P95), ms(c.P99), ms(c.BaselineP95))
	}
	tw.Flush()
}

// ms formats a duration in milliseconds as the pages and evidence do.
func ms(v *float64) string {
	if v == nil {
		return "—"
	}
	return diagnose.FormatMs(*v)
}

const keyUsage = "API key (TOKENPATH_API_KEY; default: the key `make run` keeps in $TOKENPATH_DATA_DIR/demo-key)"

var errNoKey = errors.New("no API key: pass --key, set TOKENPATH_API_KEY, or run from the directory where `make run` keeps its data (./data/demo-key)")

// defaultKey is TOKENPATH_API_KEY, else the key the demo server keeps in
// its data dir, so the README's commands work as written beside `make run`.
func defaultKey(env Env) string {
	if k := env.Getenv("TOKENPATH_API_KEY"); k != "" {
		return k
	}
	dir := firstNonEmpty(env.Getenv("TOKENPATH_DATA_DIR"), "data")
	b, err := os.ReadFile(filepath.Join(dir, "demo-key"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// Main dispatches subcommands and returns the exit code.
func Main(ctx context.Context, args []string, commands map[string]func(context.Context, Env, []string) error) int {
	env := Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(env.Stderr, "Usage: tokenpath <command> [flags]\n\nCommands:\n  diagnose   print why LLM requests are slow (verdict, evidence, components)\n  demo       send realistic demo traffic to a Tokenpath server")
		return 2
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.Stderr, "tokenpath: unknown command %q (try diagnose or demo)\n", args[0])
		return 2
	}
	if err := cmd(ctx, env, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(env.Stderr, "tokenpath %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
