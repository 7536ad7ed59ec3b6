// Package migrations holds the schema of Tokenpath's stores as SQL files
// embedded in the binary, so a deployed server never depends on files next
// to it. Each store package applies its own directory in lexical order.
package migrations

import "embed"

// Postgres holds postgres/NNNN_name.sql, applied in lexical order by
// store/postgres; a file, once released, is never edited — add a new one.
//
//go:embed postgres/*.sql
var Postgres embed.FS

// ClickHouse holds clickhouse/NNNN_name.sql: text/template files rendered by
// store/clickhouse for a single node or a cluster, then applied in order.
//
//go:embed clickhouse/*.sql
var ClickHouse embed.FS
