// Package toolerr is the gateway's failure model: every refused or failed
// tool call, REST request and authentication carries one of these codes, so
// a program can act on it and a person or model can read its message.
package toolerr

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Code is the machine-readable reason of a refused or failed call.
type Code string

// Codes. The first group is the delegation contract's error model; the rest
// are the gateway's own refusals.
const (
	// WorkerGone: the addressed member, or its pane, went away.
	WorkerGone Code = "worker_gone"
	// DeliveryFailed: herdr refused to type the message into the pane.
	DeliveryFailed Code = "delivery_failed"
	// Cancelled: the Delegation was withdrawn or deleted.
	Cancelled Code = "cancelled"
	// SubscriptionBoundary: a spawn would cross from one billing mode to
	// another.
	SubscriptionBoundary Code = "subscription_boundary"
	// FeatureDisabled: the tool's namespace is switched off on this gateway.
	FeatureDisabled Code = "feature_disabled"
	// Unauthorized: no caller identity could be resolved.
	Unauthorized Code = "unauthorized"
	// Forbidden: the caller may not do this, or not to this object.
	Forbidden Code = "forbidden"
	// NotTeamMember: a team tool was called by a member outside the team it
	// names (or in no team at all).
	NotTeamMember Code = "not_team_member"
	// NotFound: the addressed object does not exist.
	NotFound Code = "not_found"
	// InvalidArgument: the arguments are malformed or ambiguous.
	InvalidArgument Code = "invalid_argument"
	// Conflict: the request contradicts what already happened (an
	// idempotency key reused for another message, a question answered twice).
	Conflict Code = "conflict"
	// UnsupportedProviderImages: images were sent to a member whose agent
	// cannot take them (a plain command); nothing was sent.
	UnsupportedProviderImages Code = "unsupported_provider_images"
	// ImageTooLarge: an image, or a message's images together, are larger
	// than a message may carry.
	ImageTooLarge Code = "image_too_large"
	// QueueFull: the member's queue holds as many messages as it may;
	// nothing was sent.
	QueueFull Code = "queue_full"
	// HopLimit: the message would make a chain of messages (a member's
	// message sent while it works on one) longer than allowed.
	HopLimit Code = "hop_limit"
	// SpawnLimit: the caller, or its namespace, has as many members as
	// the gateway starts.
	SpawnLimit Code = "spawn_limit"
	// SenderLimit: the caller keeps as many messages, or as many bytes
	// of them, as one sender may until settled ones are deleted; nothing
	// was sent.
	SenderLimit Code = "sender_limit"
	// RateLimited: the caller sends messages faster than one sender may;
	// nothing was sent.
	RateLimited Code = "rate_limited"
	// QuotaExceeded: the API server refused the object for a
	// ResourceQuota of the namespace.
	QuotaExceeded Code = "quota_exceeded"
	// Throttled: the caller holds as many calls or streams open at once
	// as it may, or failed to authenticate too often; retry once some
	// have ended.
	Throttled Code = "throttled"
	// Internal: the gateway failed; retrying may help.
	Internal Code = "internal"
)

// Known lists every Code.
var Known = []Code{
	WorkerGone, DeliveryFailed, Cancelled, SubscriptionBoundary,
	FeatureDisabled, Unauthorized, Forbidden, NotTeamMember, NotFound,
	InvalidArgument, Conflict, UnsupportedProviderImages, ImageTooLarge,
	QueueFull, HopLimit, SpawnLimit, SenderLimit, RateLimited, QuotaExceeded, Throttled,
	Internal,
}

// Error is the structured error of a tool result ({error:{code,message}})
// and of a REST error body.
type Error struct {
	// Code says what went wrong, for programs.
	Code Code `json:"code" jsonschema:"machine-readable error code"`
	// Message says what went wrong, for people and models.
	Message string `json:"message" jsonschema:"what went wrong and what to do about it"`
}

// Error implements error.
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// New returns an Error with a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// From turns any error into an Error. API errors map onto the codes a
// caller can act on; anything else is internal.
func From(err error) *Error {
	var te *Error
	if errors.As(err, &te) {
		return te
	}
	switch {
	case apierrors.IsNotFound(err):
		return &Error{Code: NotFound, Message: err.Error()}
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return &Error{Code: Conflict, Message: err.Error()}
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return &Error{Code: InvalidArgument, Message: err.Error()}
	case IsQuotaExceeded(err):
		return &Error{Code: QuotaExceeded, Message: err.Error()}
	}
	return &Error{Code: Internal, Message: err.Error()}
}

// IsQuotaExceeded reports whether the API server refused an object for a
// ResourceQuota: Forbidden, saying "exceeded quota" (it has no reason of
// its own).
func IsQuotaExceeded(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota")
}

// HTTPStatus is the REST status for a code.
func (c Code) HTTPStatus() int {
	switch c {
	case Unauthorized:
		return http.StatusUnauthorized
	case Forbidden, SubscriptionBoundary, FeatureDisabled, NotTeamMember, QuotaExceeded:
		return http.StatusForbidden
	case QueueFull, SpawnLimit, SenderLimit, RateLimited, Throttled:
		return http.StatusTooManyRequests
	case NotFound:
		return http.StatusNotFound
	case InvalidArgument:
		return http.StatusBadRequest
	case Conflict, HopLimit:
		return http.StatusConflict
	case UnsupportedProviderImages:
		return http.StatusUnprocessableEntity
	case ImageTooLarge:
		return http.StatusRequestEntityTooLarge
	case WorkerGone:
		return http.StatusGone
	case DeliveryFailed:
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}
