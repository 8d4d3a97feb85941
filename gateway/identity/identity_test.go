package identity

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

func TestVerdictOf(t *testing.T) {
	sa := authnv1.UserInfo{Username: "system:serviceaccount:team-a:bot", Groups: []string{"system:serviceaccounts"}}
	cases := map[string]struct {
		status     authnv1.TokenReviewStatus
		want       *Principal
		wantReason string
	}{
		"service account": {
			status: authnv1.TokenReviewStatus{Authenticated: true, User: sa, Audiences: []string{fleetv1alpha1.GatewayAudience}},
			want:   &Principal{Kind: fleetv1alpha1.PrincipalServiceAccount, Name: sa.Username, Namespace: "team-a", user: &sa},
		},
		"rejected":          {status: authnv1.TokenReviewStatus{Error: "invalid bearer token"}, wantReason: "invalid_token"},
		"rejected audience": {status: authnv1.TokenReviewStatus{Error: `token audiences ["x"] is invalid for the target audiences ["fleetd"]`}, wantReason: "wrong_audience"},
		"audience not ours": {status: authnv1.TokenReviewStatus{Authenticated: true, User: sa, Audiences: []string{"other"}}, wantReason: "wrong_audience"},
		"not a service account": {
			status:     authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "alice"}, Audiences: []string{fleetv1alpha1.GatewayAudience}},
			wantReason: "not_service_account",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := verdictOf(&authnv1.TokenReview{Status: tc.status})
			reason := ""
			if got.failure != nil {
				reason = got.failure.Reason
			}
			if reason != tc.wantReason {
				t.Fatalf("reason %q, want %q", reason, tc.wantReason)
			}
			if diff := cmp.Diff(tc.want, got.principal, cmp.AllowUnexported(Principal{})); diff != "" {
				t.Errorf("principal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSplitServiceAccount(t *testing.T) {
	cases := map[string]struct {
		user         string
		wantNS, want string
		wantOK       bool
	}{
		"ok":          {user: "system:serviceaccount:ns:sa", wantNS: "ns", want: "sa", wantOK: true},
		"not an sa":   {user: "system:node:n1"},
		"no name":     {user: "system:serviceaccount:ns:"},
		"extra colon": {user: "system:serviceaccount:ns:sa:x"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ns, n, ok := splitServiceAccount(tc.user)
			if ns != tc.wantNS || n != tc.want || ok != tc.wantOK {
				t.Errorf("got %q %q %v", ns, n, ok)
			}
		})
	}
}

func TestLooksLikeJWT(t *testing.T) {
	cases := map[string]bool{
		"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln": true,
		"static-token":                false,
		"a..c":                        false,
		"a.b.c.d":                     false,
		"a.b.c d":                     false,
		strings.Repeat("a.", 2) + "ä": false,
	}
	for token, want := range cases {
		if got := looksLikeJWT(token); got != want {
			t.Errorf("looksLikeJWT(%q) = %v, want %v", token, got, want)
		}
	}
}

func TestBearerToken(t *testing.T) {
	cases := map[string]struct {
		header string
		want   string
		wantOK bool
	}{
		"bearer":      {header: "Bearer abc", want: "abc", wantOK: true},
		"case":        {header: "bearer abc", want: "abc", wantOK: true},
		"missing":     {header: ""},
		"basic":       {header: "Basic abc"},
		"empty token": {header: "Bearer "},
		"no space":    {header: "Bearerabc"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := httptestRequest(tc.header)
			got, ok := BearerToken(r)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("bearerToken = %q, %v", got, ok)
			}
		})
	}
}

// httptestRequest is a request with an Authorization header.
func httptestRequest(authorization string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://gateway/agents", nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	return r
}
