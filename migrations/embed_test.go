package migrations

import (
	"embed"
	"io/fs"
	"regexp"
	"testing"
)

// Each migration has a number of its own: two files with one number apply
// in an order decided by their names alone, which is how a change made
// beside another one can run before the table it needs exists.
func TestMigrationNumbersAreUnique(t *testing.T) {
	name := regexp.MustCompile(`^(\d{4})_[a-z0-9_]+\.sql$`)
	for dir, files := range map[string]embed.FS{"postgres": Postgres, "clickhouse": ClickHouse} {
		entries, err := fs.ReadDir(files, dir)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]string{}
		for _, e := range entries {
			m := name.FindStringSubmatch(e.Name())
			if m == nil {
				t.Errorf("%s/%s: want NNNN_name.sql", dir, e.Name())
				continue
			}
			if other, ok := seen[m[1]]; ok {
				t.Errorf("%s: %s and %s share the number %s; give the newer one the next free number", dir, other, e.Name(), m[1])
			}
			seen[m[1]] = e.Name()
		}
	}
}
