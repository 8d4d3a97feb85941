package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

func TestAddTokensAndPrice(t *testing.T) {
	pricing := &fleetv1alpha1.Pricing{Currency: "USD", InputPerMTok: "3", OutputPerMTok: "15", CachedInputPerMTok: "0.3"}
	cursor := fleetv1alpha1.TranscriptCursor{Path: "/a/s.jsonl", Offset: 400}
	cases := map[string]struct {
		usage   *fleetv1alpha1.MemberUsage
		count   agents.TokenCount
		pricing *fleetv1alpha1.Pricing
		want    *fleetv1alpha1.MemberUsage
	}{
		"the first count": {
			count:   agents.TokenCount{Cursor: cursor, Added: fleetv1alpha1.TokenUsage{InputTokens: 1000, OutputTokens: 100, CachedTokens: 10000, Calls: 1}},
			pricing: pricing,
			want:    &fleetv1alpha1.MemberUsage{TokenUsage: fleetv1alpha1.TokenUsage{InputTokens: 1000, OutputTokens: 100, CachedTokens: 10000, Calls: 1}, Cost: "0.0075", Currency: "USD", Transcript: &cursor},
		},
		"a count adds to the total": {
			usage:   &fleetv1alpha1.MemberUsage{TokenUsage: fleetv1alpha1.TokenUsage{InputTokens: 1000, Calls: 1}, Cost: "9.99", Currency: "USD"},
			count:   agents.TokenCount{Cursor: cursor, Added: fleetv1alpha1.TokenUsage{InputTokens: 1000, Calls: 1}},
			pricing: pricing,
			want:    &fleetv1alpha1.MemberUsage{TokenUsage: fleetv1alpha1.TokenUsage{InputTokens: 2000, Calls: 2}, Cost: "0.006", Currency: "USD", Transcript: &cursor},
		},
		"no pricing, no cost": {
			usage: &fleetv1alpha1.MemberUsage{Cost: "1.00", Currency: "USD"},
			count: agents.TokenCount{Cursor: cursor, Added: fleetv1alpha1.TokenUsage{OutputTokens: 5, Calls: 1}},
			want:  &fleetv1alpha1.MemberUsage{TokenUsage: fleetv1alpha1.TokenUsage{OutputTokens: 5, Calls: 1}, Transcript: &cursor},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.usage.DeepCopy()
			got := addTokens(tc.usage, tc.count, nil)
			priceUsage(got, tc.pricing)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.usage); diff != "" {
				t.Errorf("the old usage changed (-before +after):\n%s", diff)
			}
		})
	}
}
