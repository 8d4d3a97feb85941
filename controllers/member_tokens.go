package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// memberTokens counts the tokens members' model calls used, as their
// transcripts record them, by kind: input, output, cached (read from a
// prompt cache) and cache_creation (written to one).
var memberTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fleetd_member_tokens_total",
	Help: "Tokens members' model calls used, from the agents' transcripts, by kind (input, output, cached, cache_creation).",
}, []string{"kind"})

func init() {
	metrics.Registry.MustRegister(memberTokens)
}

// countTokens adds what a transcript gained to the token counters; a
// count that went back (a call's later line said less) adds nothing.
func (r *MemberReconciler) countTokens(_ *fleetv1alpha1.Member, added fleetv1alpha1.TokenUsage) {
	for kind, n := range map[string]int64{
		"input": added.InputTokens, "output": added.OutputTokens,
		"cached": added.CachedTokens, "cache_creation": added.CacheCreationTokens,
	} {
		if n > 0 {
			memberTokens.WithLabelValues(kind).Add(float64(n))
		}
	}
}
