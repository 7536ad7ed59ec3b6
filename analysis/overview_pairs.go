package analysis

import "sort"

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
