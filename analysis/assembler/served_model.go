package assembler

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/telemetry"
)

// A vLLM V1 server span names no model: a joined request takes its
// client's, but a server-only one (no client span, none matched) would
// stay without. It takes the model the server serves, when known: the
// model_name label of the server's own metrics (vLLM labels every metric
// with its served model name, vllm-project/vllm vllm/v1/metrics/loggers.py
// PrometheusStatLogger labelnames), on the instance, else the service when
// all its instances serve one; else the model of the latest request joined
// to that server (TestServedModelForServerOnlyRows).

// servedModelLookback bounds how far back the lookup reads: metrics and
// joined requests older than this may name a model since replaced.
const servedModelLookback = 6 * time.Hour

// servedModelGauges are the gauges read for the label: few series, on
// every vLLM and SGLang server, as ingest names them.
var servedModelGauges = []string{diagnose.MetricKVCacheUsage, diagnose.MetricRequestsWaiting, diagnose.MetricRequestsRunning}

// needsServedModel is a server-only request without a model.
func needsServedModel(r *telemetry.LLMRequest) bool {
	return r.Model == "" && r.ServerService != "" && r.Service == r.ServerService && r.Join == ""
}

// fillServedModels sets the served model of reqs' server-only requests
// that name none; a pass without such requests reads nothing.
func (a *Assembler) fillServedModels(ctx context.Context, project uint32, reqs []telemetry.LLMRequest) error {
	var services []string
	seen := map[string]bool{}
	var lo, hi time.Time
	for i := range reqs {
		r := &reqs[i]
		if !needsServedModel(r) {
			continue
		}
		if !seen[r.ServerService] {
			seen[r.ServerService] = true
			services = append(services, r.ServerService)
		}
		if lo.IsZero() || r.Start.Before(lo) {
			lo = r.Start
		}
		if r.Start.After(hi) {
			hi = r.Start
		}
	}
	if len(services) == 0 {
		return nil
	}
	from, to := lo.Add(-servedModelLookback), hi.Add(time.Minute)
	m, err := a.CH.Query(ctx, `SELECT service, instance, argMax(labels['model_name'], time) AS served FROM metric_points
		WHERE project_id = ? AND name IN ? AND service IN ? AND time >= ? AND time <= ? AND labels['model_name'] != ''
		GROUP BY service, instance`+assemblyReadSettings, project, servedModelGauges, services, from, to)
	if err != nil {
		return fmt.Errorf("load served models: %w", err)
	}
	byInstance := map[[2]string]string{}
	byService := map[string]string{}
	for i := range m.Len() {
		w := m.Row(i)
		svc, model := w.String("service"), w.String("served")
		byInstance[[2]string{svc, w.String("instance")}] = model
		if prev, ok := byService[svc]; ok && prev != model {
			model = "" // instances serve different models: only the instance can say
		}
		byService[svc] = model
	}
	j, err := a.CH.Query(ctx, `SELECT server_service, argMax(model, start) AS served FROM llm_requests
		WHERE project_id = ? AND server_service IN ? AND start >= ? AND start <= ? AND join_method != '' AND model != '' AND is_deleted = 0
		GROUP BY server_service`+assemblyReadSettings, project, services, from, to)
	if err != nil {
		return fmt.Errorf("load served models of joined requests: %w", err)
	}
	byJoined := map[string]string{}
	for i := range j.Len() {
		byJoined[j.Row(i).String("server_service")] = j.Row(i).String("served")
	}
	for i := range reqs {
		r := &reqs[i]
		if !needsServedModel(r) {
			continue
		}
		switch {
		case byInstance[[2]string{r.ServerService, r.Instance}] != "":
			r.Model = byInstance[[2]string{r.ServerService, r.Instance}]
		case byService[r.ServerService] != "":
			r.Model = byService[r.ServerService]
		default:
			r.Model = byJoined[r.ServerService]
		}
	}
	return nil
}
