package identity

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/scheme"
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

// TestPodMember: a token bound to a Member's current Pod is that Member; a
// token of a member Pod the Member no longer runs in is refused, which
// fences a stale agent; so is a token of a Pod that is gone, which may have
// been a member's; a token of any other Pod is a service account's.
func TestPodMember(t *testing.T) {
	const ns = "team-a"
	current := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: ns}}
	current.Status.PodUID = "uid-now"
	stopping := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: "w2", Namespace: ns, DeletionTimestamp: &metav1.Time{Time: time.Now()}, Finalizers: []string{"x"}}}
	stopping.Status.PodUID = "uid-stopping"
	pod := func(name, uid string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), Labels: labels}}
	}
	objs := []client.Object{
		current, stopping,
		pod("w1-old", "uid-old", map[string]string{fleetv1alpha1.LabelMember: "w1"}),
		pod("w1-now", "uid-now", map[string]string{fleetv1alpha1.LabelMember: "w1"}),
		pod("w1-uid-only", "uid-uid-only", map[string]string{fleetv1alpha1.LabelMemberUID: "m-uid"}),
		pod("reused", "uid-reused-now", nil),
	}
	owned := pod("w1-owned", "uid-owned", nil)
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: fleetv1alpha1.GroupVersion.String(), Kind: "Member", Name: "w1", UID: "m-uid"}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).
		WithIndex(&fleetv1alpha1.Member{}, IndexMemberPodUID, IndexMemberPod).
		WithStatusSubresource(&fleetv1alpha1.Member{}).
		WithObjects(objs...).Build()
	// The cache holds members' Pods only; the API server holds the rest.
	live := fake.NewClientBuilder().WithScheme(scheme.New()).
		WithObjects(pod("primary", "uid-primary", nil), owned).Build()
	a := NewAuthenticator(Config{Cache: c, Live: live})
	sa := func(podName, podUID string) *Principal {
		return &Principal{Kind: fleetv1alpha1.PrincipalServiceAccount, Name: "system:serviceaccount:team-a:default", Namespace: ns, user: &authnv1.UserInfo{
			Username: "system:serviceaccount:team-a:default",
			Extra:    map[string]authnv1.ExtraValue{extraPodName: {podName}, extraPodUID: {podUID}},
		}}
	}
	cases := map[string]struct {
		p          *Principal
		wantMember string
		wantReason string
	}{
		"the member's current pod": {p: sa("w1-now", "uid-now"), wantMember: "w1"},
		"a replaced member pod":    {p: sa("w1-old", "uid-old"), wantReason: "replaced_pod"},
		"a member being deleted":   {p: sa("w2-pod", "uid-stopping"), wantReason: "member_closed"},
		"a primary's pod":          {p: sa("primary", "uid-primary")},
		"a pod that is gone":       {p: sa("gone", "uid-gone"), wantReason: "pod_gone"},
		"a name another pod took":  {p: sa("reused", "uid-reused-before"), wantReason: "pod_gone"},
		"a pod a member owns":      {p: sa("w1-owned", "uid-owned"), wantReason: "replaced_pod"},
		"a pod of a member's uid":  {p: sa("w1-uid-only", "uid-uid-only"), wantReason: "replaced_pod"},
		"a token bound to no pod":  {p: &Principal{Kind: fleetv1alpha1.PrincipalServiceAccount, Namespace: ns, user: &authnv1.UserInfo{Username: "system:serviceaccount:team-a:ci"}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, f := a.podMember(context.Background(), tc.p)
			reason := ""
			if f != nil {
				reason = f.Reason
			}
			if reason != tc.wantReason {
				t.Fatalf("failure %+v, want reason %q", f, tc.wantReason)
			}
			switch {
			case tc.wantMember == "" && got != nil:
				t.Errorf("resolved to %+v, want the service account's own path", got)
			case tc.wantMember != "" && (got == nil || got.Kind != fleetv1alpha1.PrincipalMember || got.Name != tc.wantMember):
				t.Errorf("resolved to %+v, want member %s", got, tc.wantMember)
			}
		})
	}
}
