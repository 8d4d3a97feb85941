// Package samples embeds the sample manifests, one file per kind, so that
// `fleetd dev` can apply the sample Profiles.
package samples

import "embed"

// Files holds the fleet_v1alpha1_*.yaml samples.
//
//go:embed fleet_v1alpha1_*.yaml
var Files embed.FS
