-- The request context assembly takes from span attributes (the route of
-- the root span, the tenant: telemetry.RouteAttribute, SpanTenant) as
-- columns of spans. Reading attributes['http.route'] and the five tenant
-- keys read the whole attribute map of every granule in the assembler's
-- window (bench ingest: ~27 µs of the engine's CPU per span assembled, the
-- assembler a minute behind a 77k spans/s burst); these two columns are a
-- few bytes a span. Inserts write them (EncodeSpans, SpansBatch); parts
-- stored before this migration compute them from attributes when read.
ALTER TABLE {{table "spans"}} {{onCluster}} {{spanContextColumns}};
{{if .Cluster}}ALTER TABLE spans {{onCluster}} {{spanContextColumns}};{{end}}
