// Package crd embeds fleetd's CustomResourceDefinitions so that `fleetd dev`
// and the tests install exactly what `make manifests` generated.
package crd

import "embed"

// Bases holds bases/*.yaml, the generated CRDs.
//
//go:embed bases/*.yaml
var Bases embed.FS
