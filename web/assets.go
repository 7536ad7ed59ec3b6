package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/labstack/echo/v4"
)

// static holds app.css/app.js and, under vendor/, uPlot and htmx copied
// from node_modules by `make` (they come from npm, never by hand).
//
//go:embed static
var static embed.FS

// assetVersion changes whenever any embedded asset changes, so URLs with
// ?v=assetVersion can be cached for a year.
var assetVersion = func() string {
	h := sha256.New()
	_ = fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := static.ReadFile(path)
		h.Write([]byte(path))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}()

// VendorMissing reports whether uPlot/htmx were not copied in at build
// time (charts then fall back to their tables).
func VendorMissing() bool {
	_, err := static.Open("static/vendor/uPlot.iife.min.js")
	return err != nil
}

func serveStatic() echo.HandlerFunc {
	sub, _ := fs.Sub(static, "static")
	files := http.FileServer(http.FS(sub))
	return func(c echo.Context) error {
		w, r := c.Response(), c.Request()
		if r.URL.Query().Get("v") == assetVersion {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "public, max-age=300")
		}
		r.URL.Path = strings.TrimPrefix(r.URL.Path, "/static")
		// Files only: http.FileServer would list a directory's contents.
		if st, err := fs.Stat(sub, strings.Trim(path.Clean(r.URL.Path), "/")); err != nil || st.IsDir() {
			return echo.NewHTTPError(http.StatusNotFound, "Not Found")
		}
		files.ServeHTTP(w, r)
		return nil
	}
}
