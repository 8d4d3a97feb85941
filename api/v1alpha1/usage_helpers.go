package v1alpha1

import (
	"fmt"
	"math/big"
	"strings"
)

// Plus is u with d added, no count below zero: a transcript is the
// member's to write, and a count that went back never makes a total
// negative.
func (u TokenUsage) Plus(d TokenUsage) TokenUsage {
	return TokenUsage{
		InputTokens:         max(0, u.InputTokens+d.InputTokens),
		OutputTokens:        max(0, u.OutputTokens+d.OutputTokens),
		CachedTokens:        max(0, u.CachedTokens+d.CachedTokens),
		CacheCreationTokens: max(0, u.CacheCreationTokens+d.CacheCreationTokens),
		Calls:               max(0, u.Calls+d.Calls),
	}
}

// Minus is what u counts beyond since, no count below zero.
func (u TokenUsage) Minus(since TokenUsage) TokenUsage {
	return TokenUsage{
		InputTokens:         max(0, u.InputTokens-since.InputTokens),
		OutputTokens:        max(0, u.OutputTokens-since.OutputTokens),
		CachedTokens:        max(0, u.CachedTokens-since.CachedTokens),
		CacheCreationTokens: max(0, u.CacheCreationTokens-since.CacheCreationTokens),
		Calls:               max(0, u.Calls-since.Calls),
	}
}

// costDecimals is how many decimals a cost shows: a token at a price per
// million with six decimals costs less than the sixth.
const costDecimals = 6

// Cost is what u costs at p, a decimal in p.Currency rounded to six
// decimals, with trailing zeros cut down to two ("0.0105", "3.00"). An
// empty cached or cache-write price is the input price.
func (p Pricing) Cost(u TokenUsage) (string, error) {
	total := new(big.Rat)
	for _, part := range []struct {
		price  string
		tokens int64
	}{
		{p.InputPerMTok, u.InputTokens},
		{p.OutputPerMTok, u.OutputTokens},
		{cmpOr(p.CachedInputPerMTok, p.InputPerMTok), u.CachedTokens},
		{cmpOr(p.CacheWritePerMTok, p.InputPerMTok), u.CacheCreationTokens},
	} {
		price, ok := new(big.Rat).SetString(part.price)
		if !ok || price.Sign() < 0 {
			return "", fmt.Errorf("price %q is not a decimal", part.price)
		}
		total.Add(total, price.Mul(price, new(big.Rat).SetInt64(part.tokens)))
	}
	total.Quo(total, big.NewRat(1_000_000, 1))
	s := total.FloatString(costDecimals)
	s = strings.TrimRight(s, "0")
	if dot := strings.IndexByte(s, '.'); len(s)-dot-1 < 2 {
		s += strings.Repeat("0", 2-(len(s)-dot-1))
	}
	return s, nil
}

// Price is what u costs at p and in which currency; nothing without a
// pricing, or where a price cannot be read (the schema allows none such).
func (p *Pricing) Price(u TokenUsage) (cost, currency string) {
	if p == nil {
		return "", ""
	}
	cost, err := p.Cost(u)
	if err != nil {
		return "", ""
	}
	return cost, p.Currency
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
