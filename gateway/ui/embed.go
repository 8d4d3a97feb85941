// Package ui is fleetd's dashboard: the TypeScript and CSS sources in src/,
// and in dist/ what they build into (hack/ui.sh, `make ui`), committed so
// that building fleetd needs no npm. The gateway serves Files at /ui.
package ui

import (
	"embed"
	"io/fs"
)

//go:embed dist
var dist embed.FS

// Files are the built assets: index.html, app.js, app.css and the licenses
// of the front-end packages bundled into app.js.
func Files() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded; fs.Sub fails only on an invalid name.
	}
	return sub
}
