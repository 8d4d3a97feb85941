package gateway

import (
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Code is the machine-readable reason of a refused or failed call. Every
// error result of a tool, and every error body of the REST surface, carries
// one.
type Code string

// Error codes. The first group comes from DESIGN.md's error model; the rest
// are the gateway's own refusals.
const (
	// CodeWorkerGone: the addressed member, or its pane, went away.
	CodeWorkerGone Code = "worker_gone"
	// CodeDeliveryFailed: herdr refused to type the message into the pane.
	CodeDeliveryFailed Code = "delivery_failed"
	// CodeCancelled: the Delegation was withdrawn or deleted.
	CodeCancelled Code = "cancelled"
	// CodeSubscriptionBoundary: a spawn would cross from one billing mode to
	// another.
	CodeSubscriptionBoundary Code = "subscription_boundary"
	// CodeFeatureDisabled: the tool's namespace is switched off on this gateway.
	CodeFeatureDisabled Code = "feature_disabled"
	// CodeUnauthorized: no caller identity could be resolved.
	CodeUnauthorized Code = "unauthorized"
	// CodeForbidden: the caller may not do this, or not to this object.
	CodeForbidden Code = "forbidden"
	// CodeNotTeamMember: a team tool was called by a member outside the
	// team it names (or in no team at all).
	CodeNotTeamMember Code = "not_team_member"
	// CodeNotFound: the addressed object does not exist.
	CodeNotFound Code = "not_found"
	// CodeInvalidArgument: the arguments are malformed or ambiguous.
	CodeInvalidArgument Code = "invalid_argument"
	// CodeConflict: the request contradicts what already happened (an
	// idempotency key reused for another message, a question answered twice).
	CodeConflict Code = "conflict"
	// CodeInternal: the gateway failed; retrying may help.
	CodeInternal Code = "internal"
)

// knownCodes lists every Code, for validation in tests.
var knownCodes = []Code{
	CodeWorkerGone, CodeDeliveryFailed, CodeCancelled, CodeSubscriptionBoundary,
	CodeFeatureDisabled, CodeUnauthorized, CodeForbidden, CodeNotTeamMember, CodeNotFound,
	CodeInvalidArgument, CodeConflict, CodeInternal,
}

// ToolError is the structured error of a tool result ({error:{code,message}})
// and of a REST error body.
type ToolError struct {
	// Code says what went wrong, for programs.
	Code Code `json:"code" jsonschema:"machine-readable error code"`
	// Message says what went wrong, for people and models.
	Message string `json:"message" jsonschema:"what went wrong and what to do about it"`
}

// Error implements error.
func (e *ToolError) Error() string { return string(e.Code) + ": " + e.Message }

// errorf returns a ToolError with a formatted message.
func errorf(code Code, format string, args ...any) *ToolError {
	return &ToolError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// toolErrorOf turns any error into a ToolError. API errors map onto the
// codes a caller can act on; anything else is internal.
func toolErrorOf(err error) *ToolError {
	var te *ToolError
	if errors.As(err, &te) {
		return te
	}
	switch {
	case apierrors.IsNotFound(err):
		return &ToolError{Code: CodeNotFound, Message: err.Error()}
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return &ToolError{Code: CodeConflict, Message: err.Error()}
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return &ToolError{Code: CodeInvalidArgument, Message: err.Error()}
	}
	return &ToolError{Code: CodeInternal, Message: err.Error()}
}

// httpStatus is the REST status for a code.
func (c Code) httpStatus() int {
	switch c {
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden, CodeSubscriptionBoundary, CodeFeatureDisabled, CodeNotTeamMember:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeConflict:
		return http.StatusConflict
	case CodeWorkerGone:
		return http.StatusGone
	case CodeDeliveryFailed:
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}
