package v1alpha1

import "testing"

func TestPricingCost(t *testing.T) {
	sonnet := Pricing{Currency: "USD", InputPerMTok: "3", OutputPerMTok: "15", CachedInputPerMTok: "0.30", CacheWritePerMTok: "3.75"}
	cases := map[string]struct {
		pricing Pricing
		usage   TokenUsage
		want    string
	}{
		"nothing used":                    {sonnet, TokenUsage{}, "0.00"},
		"a million of each":               {sonnet, TokenUsage{InputTokens: 1e6, OutputTokens: 1e6, CachedTokens: 1e6, CacheCreationTokens: 1e6}, "22.05"},
		"one call":                        {sonnet, TokenUsage{InputTokens: 1200, OutputTokens: 340, CachedTokens: 5000, CacheCreationTokens: 800}, "0.0132"},
		"rounded to six places":           {sonnet, TokenUsage{InputTokens: 1}, "0.000003"},
		"below the sixth place":           {Pricing{InputPerMTok: "0.1", OutputPerMTok: "0"}, TokenUsage{InputTokens: 1}, "0.00"},
		"cache prices default to input":   {Pricing{InputPerMTok: "2", OutputPerMTok: "8"}, TokenUsage{CachedTokens: 500_000, CacheCreationTokens: 500_000}, "2.00"},
		"whole amounts keep two decimals": {Pricing{InputPerMTok: "10", OutputPerMTok: "0"}, TokenUsage{InputTokens: 3e6}, "30.00"},
	}
	for name, tc := range cases {
		got, err := tc.pricing.Cost(tc.usage)
		if err != nil || got != tc.want {
			t.Errorf("%s: Cost = %q, %v; want %q", name, got, err, tc.want)
		}
	}
	if _, err := (Pricing{InputPerMTok: "three", OutputPerMTok: "1"}).Cost(TokenUsage{}); err == nil {
		t.Error("a price that is no decimal was taken")
	}
}

func TestTokenUsageArithmetic(t *testing.T) {
	a := TokenUsage{InputTokens: 10, OutputTokens: 5, CachedTokens: 7, CacheCreationTokens: 3, Calls: 2}
	b := TokenUsage{InputTokens: 4, OutputTokens: 9, CachedTokens: 1, CacheCreationTokens: 3, Calls: 1}
	if got, want := a.Plus(b), (TokenUsage{14, 14, 8, 6, 3}); got != want {
		t.Errorf("Plus = %+v, want %+v", got, want)
	}
	if got, want := a.Minus(b), (TokenUsage{6, 0, 6, 0, 1}); got != want {
		t.Errorf("Minus = %+v, want %+v (no count below zero)", got, want)
	}
	if got, want := a.Plus(TokenUsage{InputTokens: -50}), (TokenUsage{0, 5, 7, 3, 2}); got != want {
		t.Errorf("Plus of a count that went back = %+v, want %+v", got, want)
	}
}
