// Package identity resolves the caller of every gateway request from its
// bearer token alone, and decides what it may do.
//
// A token is one of three kinds: a member token (its hash is in the status of
// the Member it belongs to, which only fleetd writes), a Kubernetes
// service-account token (a TokenReview for audience fleetd; the account must
// then be allowed by RBAC to create Delegations), or a static token from a
// labelled Secret, for local use. A service account's every action is also
// asked of RBAC (a SubjectAccessReview for the Access it amounts to), so the
// gateway never does more than its caller could do with kubectl. Answers of
// both reviews are reused for a short while, refusals apart from
// acceptances so that a flood of made-up tokens cannot push a good answer
// out, and each source may fail only so often (throttle.go).
package identity

import (
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// How long the results of TokenReviews and SubjectAccessReviews are reused.
// Short, so a revoked token or a removed RoleBinding takes effect within
// seconds, and long enough that a burst of calls costs one review. (A
// member token needs no review: it stops the moment its Secret or Member
// is gone from the cache.)
const (
	reviewTTL         = 5 * time.Second
	reviewNegativeTTL = 5 * time.Second
	// reviewCacheSize bounds each review cache; a full cache is swept of
	// expired entries, then cleared. Acceptances and refusals are kept in
	// caches of their own: refusals of made-up tokens fill and clear only
	// theirs.
	reviewCacheSize = 4096
)

// serviceAccountPrefix starts the user name of every service account.
const serviceAccountPrefix = "system:serviceaccount:"

// Failure is why a caller was refused: no identity (code unauthorized), an
// identity without the permission (forbidden), or a review that failed
// (internal). Its code is the one the caller sees.
type Failure struct {
	// Code is toolerr.Unauthorized, toolerr.Forbidden or toolerr.Internal.
	Code toolerr.Code
	// Reason labels the gateway's auth failure metric.
	Reason string
	// Message is sent to the caller.
	Message string
}

// ToolError is the failure as the caller sees it: its code and message,
// without the reason, which is for fleetd's own metric.
func (f *Failure) ToolError() *toolerr.Error { return &toolerr.Error{Code: f.Code, Message: f.Message} }

func unauthorized(reason, format string, args ...any) *Failure {
	return &Failure{Code: toolerr.Unauthorized, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func internal(reason, format string, args ...any) *Failure {
	return &Failure{Code: toolerr.Internal, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Claims of a token bound to a Pod, as a TokenReview reports them.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// Config is what an Authenticator reads and writes.
type Config struct {
	// Cache reads Members, indexed by IndexMemberTokenHash and
	// IndexMemberPodUID, and members' Pods.
	Cache client.Reader
	// Live reads the other Pods, which the cache does not hold, to see
	// that a pod-bound token's Pod exists and is no member's.
	Live client.Reader
	// Static reads the static-token Secret named StaticTokens; nil, or an
	// empty name, switches static tokens off.
	Static       client.Reader
	StaticTokens types.NamespacedName
	// Reviews creates TokenReviews and SubjectAccessReviews.
	Reviews client.Client
	// Namespace is where static principals act.
	Namespace string
	// Clock times the reviews' reuse and the throttle.
	Clock clock.PassiveClock
	// FailureBurst is how many authentications one source may fail before
	// it is throttled, and FailureInterval how often it may then try once
	// more. Zero takes DefaultFailureBurst and DefaultFailureInterval; a
	// negative burst switches the throttle off.
	FailureBurst    int
	FailureInterval time.Duration
}

// Authenticator resolves bearer tokens to principals and asks RBAC what
// service accounts may do.
type Authenticator struct {
	cfg Config
	// tokens and rejected are the recent TokenReviews that accepted a
	// token and that refused one; access and denied, the
	// SubjectAccessReviews.
	tokens, rejected *ttlCache[*tokenReview]
	access, denied   *ttlCache[bool]
	failures         *failureThrottle
	// pods remembers the UIDs of Pods found to be no member's.
	pods *ttlCache[bool]
}

// NewAuthenticator returns an Authenticator on cfg.
func NewAuthenticator(cfg Config) *Authenticator {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.FailureBurst == 0 {
		cfg.FailureBurst = DefaultFailureBurst
	}
	if cfg.FailureInterval <= 0 {
		cfg.FailureInterval = DefaultFailureInterval
	}
	return &Authenticator{
		cfg:      cfg,
		tokens:   newTTLCache[*tokenReview](cfg.Clock),
		rejected: newTTLCache[*tokenReview](cfg.Clock),
		access:   newTTLCache[bool](cfg.Clock),
		denied:   newTTLCache[bool](cfg.Clock),
		failures: newFailureThrottle(cfg.Clock, cfg.FailureBurst, cfg.FailureInterval),
		pods:     newTTLCache[bool](cfg.Clock),
	}
}

// tokenReview is a remembered TokenReview verdict.
type tokenReview struct {
	principal *Principal
	failure   *Failure
}

// Authenticate resolves a bearer token. Member and static tokens are checked
// first, from the cache; anything shaped like a JWT goes to a TokenReview,
// and a service account must then be allowed by RBAC to create Delegations
// in its namespace; each of its actions is checked again for what it
// amounts to (Authorize).
func (a *Authenticator) Authenticate(ctx context.Context, token string) (*Principal, *Failure) {
	return a.AuthenticateFrom(ctx, token, "")
}

// AuthenticateFrom is Authenticate for a request from source (the
// client's address), which may fail only so often: a token that is not
// known to be good takes one of source's attempts before it is checked,
// and a source with none left is refused with toolerr.Throttled before
// any review. Member and static tokens, and service-account tokens a
// review accepted a moment ago, never wait for the throttle, so a
// neighbour's flood does not lock out the members that share its address.
func (a *Authenticator) AuthenticateFrom(ctx context.Context, token, source string) (*Principal, *Failure) {
	raw := []byte(token)
	if p, f := a.memberToken(ctx, raw); p != nil || f != nil {
		if f != nil && f.Code == toolerr.Unauthorized {
			// A revoked token counts against its source; it cost
			// nothing to check, so it is not refused for the count.
			_, _ = a.failures.take(source)
		}
		return p, f
	}
	if p, f := a.staticToken(ctx, raw); p != nil || f != nil {
		return p, f
	}
	review, known := a.tokens.get(fleetv1alpha1.TokenHash(token))
	if !known {
		refund, ok := a.failures.take(source)
		if !ok {
			return nil, &Failure{Code: toolerr.Throttled, Reason: "throttled",
				Message: "too many failed authentications from your address; wait a moment and send a valid token"}
		}
		if !looksLikeJWT(token) {
			return nil, unauthorized("unknown_token", "the bearer token is not a member, static or service-account token")
		}
		if review = a.review(ctx, token); review.failure == nil || review.failure.Code == toolerr.Internal {
			refund()
		}
	}
	if review.failure != nil {
		return nil, review.failure
	}
	p := *review.principal
	// The review is reused for a while; which Member a Pod runs is looked
	// up afresh every time, so a replaced Pod's token stops at once.
	if m, f := a.podMember(ctx, &p); m != nil || f != nil {
		return m, f
	}
	if f := a.Authorize(ctx, &p, CreateDelegations); f != nil {
		return nil, f
	}
	return &p, nil
}

// memberToken resolves a member token: the Member whose status, which only
// fleetd writes, holds the token's hash. A Secret made by anyone else never
// authenticates anyone; but the token works only while the Member's token
// Secret (status.tokenSecretName, fleetd's, for this Member's UID) holds
// it, read from the informer's cache: a deleted or rotated Secret revokes
// the token as soon as the watch brings the change.
func (a *Authenticator) memberToken(ctx context.Context, token []byte) (*Principal, *Failure) {
	var members fleetv1alpha1.MemberList
	if err := a.cfg.Cache.List(ctx, &members, client.MatchingFields{IndexMemberTokenHash: fleetv1alpha1.TokenHash(string(token))}); err != nil {
		return nil, internal("lookup_error", "looking up the token: %v", err)
	}
	switch len(members.Items) {
	case 0:
		return nil, nil
	case 1:
		m := &members.Items[0]
		if m.DeletionTimestamp != nil {
			return nil, unauthorized("member_closed", "member %s is stopped (being deleted): its token no longer works", m.Name)
		}
		if f := a.tokenSecretHolds(ctx, m); f != nil {
			return nil, f
		}
		return &Principal{Kind: fleetv1alpha1.PrincipalMember, Name: m.Name, Namespace: m.Namespace, Member: m}, nil
	}
	// 256 random bits do not collide: two Members claiming one token
	// means one status was copied.
	return nil, unauthorized("ambiguous_token", "the token belongs to more than one member")
}

// tokenSecretHolds checks that m's token Secret still holds the token
// whose hash m's status records.
func (a *Authenticator) tokenSecretHolds(ctx context.Context, m *fleetv1alpha1.Member) *Failure {
	revoked := unauthorized("revoked_token", "member %s's token was revoked (its token Secret was deleted or rotated)", m.Name)
	if m.Status.TokenSecretName == "" {
		return revoked
	}
	var s corev1.Secret
	err := a.cfg.Cache.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Status.TokenSecretName}, &s)
	switch {
	case apierrors.IsNotFound(err):
		return revoked
	case err != nil:
		return internal("lookup_error", "reading member %s's token Secret: %v", m.Name, err)
	}
	held := fleetv1alpha1.TokenHash(string(s.Data[fleetv1alpha1.TokenSecretKey]))
	if s.Labels[fleetv1alpha1.LabelMemberUID] != string(m.UID) || subtle.ConstantTimeCompare([]byte(held), []byte(m.Status.TokenHash)) != 1 {
		return revoked
	}
	return nil
}

// staticToken resolves a static token. Every key is compared, so the time
// taken does not say which key matched or how much of a token was right.
func (a *Authenticator) staticToken(ctx context.Context, token []byte) (*Principal, *Failure) {
	if a.cfg.StaticTokens.Name == "" || a.cfg.Static == nil {
		return nil, nil
	}
	var s corev1.Secret
	if err := a.cfg.Static.Get(ctx, a.cfg.StaticTokens, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, internal("lookup_error", "reading the static tokens: %v", err)
	}
	if _, ok := s.Labels[fleetv1alpha1.LabelStaticToken]; !ok {
		return nil, nil
	}
	keys := make([]string, 0, len(s.Data))
	for k := range s.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	match := ""
	for _, k := range keys {
		v := bytes.TrimSpace(s.Data[k])
		if len(v) > 0 && subtle.ConstantTimeCompare(v, token) == 1 {
			match = k
		}
	}
	if match == "" {
		return nil, nil
	}
	return &Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: match, Namespace: a.cfg.Namespace}, nil
}

// review asks the API server who a service-account token belongs to, for
// the gateway's audience, reusing a recent answer.
func (a *Authenticator) review(ctx context.Context, token string) *tokenReview {
	key := fleetv1alpha1.TokenHash(token)
	if r, ok := a.tokens.get(key); ok {
		return r
	}
	if r, ok := a.rejected.get(key); ok {
		return r
	}
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{fleetv1alpha1.GatewayAudience}}}
	if err := a.cfg.Reviews.Create(ctx, tr); err != nil {
		// Not cached: the next request asks again.
		return &tokenReview{failure: internal("review_error", "reviewing the token: %v", err)}
	}
	r := verdictOf(tr)
	if r.failure != nil {
		a.rejected.put(key, r, reviewNegativeTTL)
	} else {
		a.tokens.put(key, r, reviewTTL)
	}
	return r
}

// verdictOf turns a TokenReview into a principal or a refusal.
func verdictOf(tr *authnv1.TokenReview) *tokenReview {
	unauthorized := func(reason, format string, args ...any) *tokenReview {
		return &tokenReview{failure: unauthorized(reason, format, args...)}
	}
	st := tr.Status
	if !st.Authenticated {
		if strings.Contains(st.Error, "audience") {
			return unauthorized("wrong_audience", "the token is not for audience %q", fleetv1alpha1.GatewayAudience)
		}
		return unauthorized("invalid_token", "the token was not accepted")
	}
	if !slices.Contains(st.Audiences, fleetv1alpha1.GatewayAudience) {
		return unauthorized("wrong_audience", "the token is not for audience %q", fleetv1alpha1.GatewayAudience)
	}
	ns, _, ok := splitServiceAccount(st.User.Username)
	if !ok {
		return unauthorized("not_service_account", "only service-account tokens are accepted, not %q", st.User.Username)
	}
	user := st.User
	return &tokenReview{principal: &Principal{Kind: fleetv1alpha1.PrincipalServiceAccount, Name: st.User.Username, Namespace: ns, user: &user}}
}

// splitServiceAccount splits system:serviceaccount:<namespace>:<name>.
func splitServiceAccount(user string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, serviceAccountPrefix)
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}

// looksLikeJWT reports whether a token has the shape of a JWT (three
// base64url segments), so that random strings never cost a TokenReview.
func looksLikeJWT(token string) bool {
	if len(token) > 16<<10 {
		return false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" {
			return false
		}
		for _, r := range p {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '=') {
				return false
			}
		}
	}
	return true
}

// IndexMemberTokenHash is the field index of Members by status.tokenHash
// that member tokens are looked up by; register it with IndexMemberToken.
const IndexMemberTokenHash = "identity.fleetd.dev/token-hash"

// IndexMemberToken indexes a Member by the hash of its token, which only
// fleetd writes.
func IndexMemberToken(o client.Object) []string {
	m, ok := o.(*fleetv1alpha1.Member)
	if !ok || m.Status.TokenHash == "" {
		return nil
	}
	return []string{m.Status.TokenHash}
}

// IndexMemberPodUID is the field index of Members by status.podUID that a
// pod member is looked up by; register it with IndexMemberPod.
const IndexMemberPodUID = "identity.fleetd.dev/pod-uid"

// IndexMemberPod indexes a Member by the UID of its current Pod, which only
// fleetd writes.
func IndexMemberPod(o client.Object) []string {
	m, ok := o.(*fleetv1alpha1.Member)
	if !ok || m.Status.PodUID == "" {
		return nil
	}
	return []string{m.Status.PodUID}
}

// BearerToken extracts the token of an Authorization: Bearer header.
func BearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return "", false
	}
	return token, true
}
