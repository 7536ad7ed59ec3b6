package analysis

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// ServiceInfo is one service seen sending or serving LLM requests.
type ServiceInfo struct {
	Service   string    `json:"service"`
	Models    []string  `json:"models"`
	Instances []string  `json:"instances"`
	LastSeen  time.Time `json:"last_seen"`
	// Role: "client" (calls models), "server" (inference server), or both.
	Role string `json:"role"`
}

// Services lists services with LLM traffic since a time. It reads the
// hourly name counts (llm_request_names), not the requests: pages call it
// on every view for their pickers, over a 7-day lookback that may hold
// millions of requests. The lookback starts at the hour of since.
func (q *Queries) Services(ctx context.Context, project uint32, since time.Time) ([]ServiceInfo, error) {
	r, err := q.CH.Query(ctx, `
		SELECT service, groupUniqArray(50)(model) AS models, groupUniqArray(100)(instance) AS instances, CAST(max(last_start) AS DateTime64(9, 'UTC')) AS last_seen, 'client' AS role
		FROM llm_request_names WHERE project_id = ? AND hour >= toStartOfHour(?) GROUP BY service
		UNION ALL
		SELECT server_service AS service, groupUniqArray(50)(model) AS models, groupUniqArray(100)(instance) AS instances, CAST(max(last_start) AS DateTime64(9, 'UTC')) AS last_seen, 'server' AS role
		FROM llm_request_names WHERE project_id = ? AND hour >= toStartOfHour(?) AND server_service != '' GROUP BY server_service`,
		project, since, project, since)
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	by := map[string]*ServiceInfo{}
	for i := 0; i < r.Len(); i++ {
		w := r.Row(i)
		name := w.String("service")
		s := by[name]
		if s == nil {
			s = &ServiceInfo{Service: name, Role: w.String("role")}
			by[name] = s
		} else if s.Role != w.String("role") {
			s.Role = "both"
		}
		s.Models = mergeSorted(s.Models, w.Strings("models"))
		s.Instances = mergeSorted(s.Instances, w.Strings("instances"))
		if t := w.Time("last_seen"); t.After(s.LastSeen) {
			s.LastSeen = t
		}
	}
	if err := q.addMetricsServers(ctx, project, since, by); err != nil {
		return nil, err
	}
	out := make([]ServiceInfo, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Service < out[j].Service })
	return out, nil
}

func mergeSorted(a, b []string) []string {
	set := map[string]bool{}
	for _, s := range append(a, b...) {
		if s != "" {
			set[s] = true
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
