// Package reliability holds process-level reliability tests: they
// build cmd/server, run it as a child process on 127.0.0.1 ports and attack
// it — a PostgreSQL outage, slow and idle clients, a full and a read-only
// data dir (on a tmpfs the test mounts, so it runs as root), overload
// beyond capacity, sustained mixed load. The package has no code of its
// own; see the _test.go files and the shared helpers in app/apptest.
// `go test ./reliability/` runs the short mode (part of `make test`);
// TOKENPATH_RELIABILITY_LONG=1 (`make test-reliability`) runs the long one.
package reliability
