// Package admission embeds fleetd's admission policies so that `fleetd dev`
// and the tests install exactly what a cluster gets.
package admission

import "embed"

// Policies holds the policy manifests.
//
//go:embed policy_*.yaml
var Policies embed.FS
