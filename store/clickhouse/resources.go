package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// ResourcesBatch lays resources out as columns of the resources table.
// Insert it before the spans that reference the resources, so no reader
// meets a span whose resource is missing.
func ResourcesBatch(resources []telemetry.Resource) *Batch {
	n := len(resources)
	project, hash := make([]uint32, n), make([]uint64, n)
	service := make([]string, n)
	attrs := make([]map[string]string, n)
	lastSeen := make([]time.Time, n)
	for i, r := range resources {
		project[i], hash[i], service[i], attrs[i], lastSeen[i] = r.ProjectID, r.Hash, r.Service, orEmpty(r.Attributes), r.LastSeen
	}
	return &Batch{Table: "resources", Foreground: true, Columns: []BatchColumn{
		{"project_id", "UInt32", project},
		{"resource_hash", "UInt64", hash},
		{"service", "LowCardinality(String)", service},
		{"attributes", "Map(LowCardinality(String), String)", attrs},
		{"last_seen", "DateTime64(9, 'UTC')", lastSeen},
	}}
}

// AttachResources fills the Resource of spans read with SpanColumns that
// reference the resources table (ResourceHash ≠ 0); spans stored with their
// resource inline keep it. One query for all the spans' resources.
func (s *Store) AttachResources(ctx context.Context, project uint32, spans []telemetry.Span) error {
	var hashes []uint64
	seen := map[uint64]bool{}
	for i := range spans {
		if h := spans[i].ResourceHash; h != 0 && !seen[h] {
			seen[h] = true
			hashes = append(hashes, h)
		}
	}
	if len(hashes) == 0 {
		return nil
	}
	// Every row of one key holds the same attributes (the key is their
	// hash), so any one will do: no FINAL.
	r, err := s.Query(ctx, "SELECT resource_hash, attributes FROM resources WHERE project_id = ? AND resource_hash IN ? LIMIT 1 BY resource_hash",
		project, hashes)
	if err != nil {
		return fmt.Errorf("load resources: %w", err)
	}
	byHash := make(map[uint64]map[string]string, r.Len())
	for i := 0; i < r.Len(); i++ {
		w := r.Row(i)
		byHash[uint64(w.Int("resource_hash"))] = w.StringMap("attributes")
	}
	for i := range spans {
		if attrs, ok := byHash[spans[i].ResourceHash]; ok && spans[i].ResourceHash != 0 {
			spans[i].Resource = attrs
		}
	}
	return nil
}
