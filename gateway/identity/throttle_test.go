package identity

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	testclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/scheme"
)

// goodToken is the one service-account token countingReviews accepts.
const goodToken = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJib3QifQ.c2lnbmF0dXJl"

// countingReviews answers TokenReviews (accepting goodToken alone) and
// SubjectAccessReviews (allowing all), and counts the TokenReviews by
// token.
type countingReviews struct {
	client.Client
	mu      sync.Mutex
	reviews map[string]int
}

func (c *countingReviews) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	switch o := obj.(type) {
	case *authnv1.TokenReview:
		c.mu.Lock()
		c.reviews[o.Spec.Token]++
		c.mu.Unlock()
		if o.Spec.Token == goodToken {
			o.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{fleetv1alpha1.GatewayAudience},
				User: authnv1.UserInfo{Username: "system:serviceaccount:team-a:bot"}}
		} else {
			o.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
	case *authzv1.SubjectAccessReview:
		o.Status.Allowed = true
	default:
		return fmt.Errorf("unexpected %T", obj)
	}
	return nil
}

func (c *countingReviews) count(token string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reviews[token]
}

func (c *countingReviews) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.reviews {
		n += v
	}
	return n
}

func newTestAuthenticator(clk *testclock.FakeClock, burst int) (*Authenticator, *countingReviews) {
	cache := fake.NewClientBuilder().WithScheme(scheme.New()).
		WithIndex(&fleetv1alpha1.Member{}, IndexMemberTokenHash, IndexMemberToken).
		WithIndex(&fleetv1alpha1.Member{}, IndexMemberPodUID, IndexMemberPod).
		Build()
	reviews := &countingReviews{reviews: map[string]int{}}
	return NewAuthenticator(Config{Cache: cache, Reviews: reviews, Clock: clk, FailureBurst: burst}), reviews
}

// fakeJWT is a made-up token with a JWT's shape, which costs a review.
func fakeJWT(i int) string { return fmt.Sprintf("eyJhbGciOiJub25lIn0.eyJuIjo%d.c2ln", i) }

// TestRejectedTokensKeepAcceptedOnes: a flood of distinct made-up tokens,
// more than a review cache holds, does not push out the review of a good
// token: it is not reviewed again within its reuse.
func TestRejectedTokensKeepAcceptedOnes(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	a, reviews := newTestAuthenticator(clk, -1)
	ctx := context.Background()
	if _, f := a.Authenticate(ctx, goodToken); f != nil {
		t.Fatalf("the good token: %+v", f)
	}
	for i := range 2 * reviewCacheSize {
		if _, f := a.Authenticate(ctx, fakeJWT(i)); f == nil || f.Code != toolerr.Unauthorized {
			t.Fatalf("made-up token %d: %+v, want unauthorized", i, f)
		}
	}
	if _, f := a.Authenticate(ctx, goodToken); f != nil {
		t.Fatalf("the good token after the flood: %+v", f)
	}
	if n := reviews.count(goodToken); n != 1 {
		t.Fatalf("the good token was reviewed %d times, want once: the flood pushed its review out", n)
	}
}

// TestFailedAuthenticationThrottledPerSource: many made-up tokens from one
// source at once reach the API server only as often as the burst allows,
// however they interleave; the rest are refused with throttled before any
// review. Another source, and a token reviewed a moment ago, are not
// held back, and the source may try again once the clock moves on.
func TestFailedAuthenticationThrottledPerSource(t *testing.T) {
	const burst, attempts = 8, 200
	clk := testclock.NewFakeClock(time.Now())
	a, reviews := newTestAuthenticator(clk, burst)
	ctx := context.Background()
	if _, f := a.AuthenticateFrom(ctx, goodToken, "10.0.0.1"); f != nil {
		t.Fatalf("the good token: %+v", f)
	}

	var throttled, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Go(func() {
			_, f := a.AuthenticateFrom(ctx, fakeJWT(i), "10.0.0.1")
			switch {
			case f == nil:
				t.Errorf("made-up token %d accepted", i)
			case f.Code == toolerr.Throttled:
				throttled.Add(1)
			case f.Code == toolerr.Unauthorized:
				refused.Add(1)
			default:
				t.Errorf("made-up token %d: %+v", i, f)
			}
		})
	}
	wg.Wait()
	if r, th := int(refused.Load()), int(throttled.Load()); r != burst || th != attempts-burst {
		t.Fatalf("%d refused after a review and %d throttled, want %d and %d", r, th, burst, attempts-burst)
	}
	if n := reviews.total(); n != burst+1 {
		t.Fatalf("%d TokenReviews, want %d (the good token and the burst)", n, burst+1)
	}
	if _, f := a.AuthenticateFrom(ctx, goodToken, "10.0.0.1"); f != nil {
		t.Fatalf("the good token, reviewed a moment ago, from the throttled source: %+v", f)
	}
	if _, f := a.AuthenticateFrom(ctx, fakeJWT(-1), "10.0.0.2"); f == nil || f.Code != toolerr.Unauthorized {
		t.Fatalf("another source: %+v, want its own attempts", f)
	}
	clk.Step(DefaultFailureInterval)
	if _, f := a.AuthenticateFrom(ctx, fakeJWT(-2), "10.0.0.1"); f == nil || f.Code != toolerr.Unauthorized {
		t.Fatalf("after an interval: %+v, want one more attempt", f)
	}
	if _, f := a.AuthenticateFrom(ctx, fakeJWT(-3), "10.0.0.1"); f == nil || f.Code != toolerr.Throttled {
		t.Fatalf("a second attempt in the interval: %+v, want throttled", f)
	}
}
