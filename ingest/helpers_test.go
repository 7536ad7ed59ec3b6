package ingest

import (
	"io"
	"log/slog"
)

// Helpers shared by the internal and external (ingest_test) tests; exported
// names in _test.go files are visible to both and to nothing else. OTLP
// payload builders live in app/apptest/otlptest, shared with reliability/.

// QuietLog discards test logs.
var QuietLog = slog.New(slog.NewTextHandler(io.Discard, nil))
