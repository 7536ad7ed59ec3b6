package analysis

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
)

// SettingServerMappings is the settings key of the project's gateway
// mappings ([]ServerMapping).
const SettingServerMappings = "server_mappings"

// maxServerMappings bounds a project's mappings: each is compared with
// every endpoint a diagnosed service calls.
const maxServerMappings = 200

// ServerMapping ties the address an app's calls name (server.address and
// server.port of its client spans) to the inference server whose metrics
// answer for it, where no address matches: a gateway or load balancer in
// between. Server is the metrics' service name, or one of its instances
// (host:port, as the scrape target or service.instance.id names it).
type ServerMapping struct {
	Endpoint string `json:"endpoint"`
	Server   string `json:"server"`
}

// ServerMappingSource reads a project's mappings (StoredSettings).
type ServerMappingSource interface {
	ServerMappings(ctx context.Context, project uint32) ([]ServerMapping, error)
}

// CleanServerMappings checks and normalizes mappings as a form or the API
// sends them: an endpoint is a host or host:port without a scheme or
// path, each endpoint is mapped once, and both sides are named. The error
// lists every problem in one sentence; nothing is saved with it.
func CleanServerMappings(in []ServerMapping) ([]ServerMapping, error) {
	var out []ServerMapping
	var problems []string
	seen := map[string]bool{}
	for _, m := range in {
		m.Endpoint, m.Server = strings.ToLower(strings.TrimSpace(m.Endpoint)), strings.TrimSpace(m.Server)
		switch {
		case m.Endpoint == "" && m.Server == "":
			continue
		case m.Endpoint == "":
			problems = append(problems, fmt.Sprintf("%q has no address the app calls", m.Server))
		case m.Server == "":
			problems = append(problems, fmt.Sprintf("%s has no metrics server", m.Endpoint))
		case !validEndpoint(m.Endpoint):
			problems = append(problems, fmt.Sprintf("%q is not a host or host:port (no scheme or path, as server.address and server.port name it)", m.Endpoint))
		case seen[m.Endpoint]:
			problems = append(problems, fmt.Sprintf("%s is mapped twice", m.Endpoint))
		default:
			seen[m.Endpoint] = true
			out = append(out, m)
		}
	}
	if len(out) > maxServerMappings {
		problems = append(problems, fmt.Sprintf("at most %d mappings", maxServerMappings))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	slices.SortFunc(out, func(a, b ServerMapping) int { return strings.Compare(a.Endpoint, b.Endpoint) })
	return out, nil
}

func validEndpoint(e string) bool {
	if strings.ContainsAny(e, "/ ?#@") || strings.Contains(e, "://") {
		return false
	}
	if host, port, err := net.SplitHostPort(e); err == nil {
		return host != "" && port != ""
	}
	return !strings.Contains(e, ":") || net.ParseIP(e) != nil
}

// ServerMappings returns the project's gateway mappings (none when never
// saved).
func (s *StoredSettings) ServerMappings(ctx context.Context, project uint32) ([]ServerMapping, error) {
	var out []ServerMapping
	if _, err := s.PG.Setting(ctx, int64(project), SettingServerMappings, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// SaveServerMappings replaces the project's gateway mappings.
func (s *StoredSettings) SaveServerMappings(ctx context.Context, project uint32, m []ServerMapping) error {
	if m == nil {
		m = []ServerMapping{}
	}
	return s.PG.PutSetting(ctx, int64(project), SettingServerMappings, m)
}

// mappedServers returns the servers (metrics services) the mappings name
// for the called endpoints, with the endpoint each came from. A mapping's
// server is a service name, or an instance of one; an endpoint given as a
// bare host matches calls to that host on any port.
func mappedServers(mappings []ServerMapping, endpoints []string, series map[string][]serverInstance) map[string]string {
	out := map[string]string{}
	for _, m := range mappings {
		for _, e := range endpoints {
			host, _, err := net.SplitHostPort(e)
			if m.Endpoint != strings.ToLower(e) && (err != nil || m.Endpoint != strings.ToLower(host)) {
				continue
			}
			if _, ok := series[m.Server]; ok {
				out[m.Server] = e
				continue
			}
			for srv, instances := range series {
				if slices.Contains(instanceNames(instances), m.Server) {
					out[srv] = e
				}
			}
		}
	}
	return out
}
