package analysis

import (
	"context"
	"fmt"
	"sort"

	"github.com/tokenpath/tokenpath/analysis/diagnose"
	"github.com/tokenpath/tokenpath/store/clickhouse"
)

// VerdictService is the service whose diagnosis stands for this row's
// verdict: the calling app of a pair with the same requests (its users
// see the latency, its SLO judges it), else the service itself.
func (s ServiceOverview) VerdictService() string {
	if s.SameRequestsAs != "" && s.Role == "server" {
		return s.SameRequestsAs
	}
	return s.Service
}

// partnerExpr is, per request and name of serviceNames, the service on the
// other side ("" for none).
const partnerExpr = "groupUniqArray(21)(if(name = service, server_service, service)) AS partners"

// setPartners reads a row's partners, leaving out itself and "".
func (s *ServiceOverview) setPartners(partners []string) {
	for _, p := range partners {
		if p == "" || p == s.Service {
			s.Unpaired = true
			continue
		}
		s.Partners = append(s.Partners, p)
	}
	sort.Strings(s.Partners)
}

// pairServices links each app and inference server that see exactly the
// same requests (TestOverviewPairsAppAndServer).
func pairServices(services []ServiceOverview) {
	index := map[string]int{}
	for i, s := range services {
		index[s.Service] = i
	}
	for i := range services {
		a := &services[i]
		if a.Role != "client" || a.Unpaired || len(a.Partners) != 1 {
			continue
		}
		j, ok := index[a.Partners[0]]
		if !ok {
			continue
		}
		b := &services[j]
		if b.Role == "server" && !b.Unpaired && len(b.Partners) == 1 && b.Partners[0] == a.Service && a.Requests == b.Requests {
			a.SameRequestsAs, b.SameRequestsAs = b.Service, a.Service
		}
	}
}

// servicePairsSQL reads, per service of either side in [from, to), its
// role, requests and partners from the per-minute rollup; a partner whose
// every request was retracted is left out.
func servicePairsSQL(project uint32, w diagnose.Range) (string, []any) {
	return `SELECT name, max(client) AS is_client, max(server) AS is_server, sum(n) AS requests, groupArray(partner) AS partners FROM (
			SELECT name, if(name = service, server_service, service) AS partner, max(name = service) AS client,
				max(name = server_service) AS server, sum(requests) AS n
			FROM ` + clickhouse.EpisodeRollup + ` ARRAY JOIN ` + serviceNames + `
			WHERE project_id = ? AND minute >= ? AND minute < ?
			GROUP BY name, partner HAVING n > 0)
		GROUP BY name`, []any{project, w.From, w.To}
}

// servicePairs reads the window's services with their roles, partners and
// pairs (pairServices).
func (q *Queries) servicePairs(ctx context.Context, project uint32, w diagnose.Range) ([]ServiceOverview, error) {
	sql, args := servicePairsSQL(project, w)
	res, err := q.CH.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("paired services: %w", err)
	}
	services := make([]ServiceOverview, 0, res.Len())
	for i := range res.Len() {
		row := res.Row(i)
		s := ServiceOverview{Service: row.String("name"), Requests: int(row.Int("requests")), Role: serviceRole(row.Bool("is_client"), row.Bool("is_server"))}
		s.setPartners(row.Strings("partners"))
		services = append(services, s)
	}
	pairServices(services)
	return services, nil
}

// PairedApps maps each inference server of the window that served exactly
// one app's requests, and only them, to that app: the pairing the overview
// shows (pairServices), read from the per-minute rollup so the episode
// detector can ask it of any episode's window (TestPairedApps).
func (q *Queries) PairedApps(ctx context.Context, project uint32, w diagnose.Range) (map[string]string, error) {
	services, err := q.servicePairs(ctx, project, w)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range services {
		if v := s.VerdictService(); v != s.Service {
			out[s.Service] = v
		}
	}
	return out, nil
}
