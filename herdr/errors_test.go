package herdr

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorIs(t *testing.T) {
	wrapped := func(code string) error {
		return fmt.Errorf("herdr pane.read: %w", &Error{Code: code, Message: "some words"})
	}
	cases := map[string]struct {
		err    error
		target error
		want   bool
	}{
		"same code":                     {err: wrapped(CodeAgentBlocked), target: ErrAgentBlocked, want: true},
		"other code":                    {err: wrapped(CodeAgentBlocked), target: ErrAgentNotFound, want: false},
		"invalid request":               {err: wrapped(CodeInvalidRequest), target: ErrInvalidRequest, want: true},
		"pane not found is not found":   {err: wrapped(CodePaneNotFound), target: ErrNotFound, want: true},
		"agent not found is not found":  {err: wrapped(CodeAgentNotFound), target: ErrNotFound, want: true},
		"agent pane not found":          {err: wrapped(CodeAgentPaneNotFound), target: ErrNotFound, want: true},
		"blocked is not not found":      {err: wrapped(CodeAgentBlocked), target: ErrNotFound, want: false},
		"message does not matter":       {err: wrapped(CodePaneNotFound), target: &Error{Code: CodePaneNotFound, Message: "x"}, want: true},
		"plain error is no herdr error": {err: errors.New("pane_not_found"), target: ErrPaneNotFound, want: false},
		"unknown code still matchable":  {err: wrapped("brand_new_code"), target: &Error{Code: "brand_new_code"}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := errors.Is(tc.err, tc.target); got != tc.want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", tc.err, tc.target, got, tc.want)
			}
		})
	}
}

func TestErrorAs(t *testing.T) {
	err := fmt.Errorf("herdr agent.prompt: %w", &Error{Code: CodeAgentBlocked, Message: "agent a is blocked"})
	var herr *Error
	if !errors.As(err, &herr) {
		t.Fatalf("errors.As(%v) found no *Error", err)
	}
	if herr.Code != CodeAgentBlocked || herr.Message != "agent a is blocked" {
		t.Errorf("errors.As gave %+v", herr)
	}
}
