package clickhouse

import "context"

type interactiveKey struct{}

// Interactive marks ctx's statements as ones a person is waiting for: a
// page, an API read, a /metrics scrape. The embedded engine keeps one
// connection that only such statements may take, so a diagnosis answers
// in its own time even while inserts and assembler passes hold every
// other connection (at full ingest they hold them back to back). A
// ClickHouse server's pool is large enough that it makes no difference.
func Interactive(ctx context.Context) context.Context {
	return context.WithValue(ctx, interactiveKey{}, true)
}

func isInteractive(ctx context.Context) bool {
	v, _ := ctx.Value(interactiveKey{}).(bool)
	return v
}
