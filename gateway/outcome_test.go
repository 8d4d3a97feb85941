package gateway

import (
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// withStatus builds a Delegation with a status.
func withStatus(name string, status fleetv1alpha1.DelegationStatus) *fleetv1alpha1.Delegation {
	d := testutil.MakeDelegation(name, "ns", "w1", "do it").Obj()
	d.Status = status
	return d
}

func TestOutcomeOf(t *testing.T) {
	open := []fleetv1alpha1.Question{{TurnID: "d.q1", Text: "which?", Answer: ptr.To("that")}, {TurnID: "d.q2", Text: "and then?"}}
	cases := map[string]struct {
		status   fleetv1alpha1.DelegationStatus
		answered sets.Set[string]
		want     *SendOutput
		wantCode toolerr.Code
		wantDone bool
	}{
		"pending":                         {status: fleetv1alpha1.DelegationStatus{}},
		"working":                         {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking}},
		"replied":                         {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, Outcome: fleetv1alpha1.OutcomeReply, Reply: ptr.To("hi")}, want: &SendOutput{Outcome: "reply", Text: "hi"}, wantDone: true},
		"replied without outcome written": {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, Reply: ptr.To("hi")}, want: &SendOutput{Outcome: "reply", Text: "hi"}, wantDone: true},
		"turn done":                       {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTurnDone, Tail: ptr.To("$ ")}, want: &SendOutput{Outcome: "turn_done", Text: "$ "}, wantDone: true},
		"timed out":                       {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut}, want: &SendOutput{Outcome: "timeout"}, wantDone: true},
		"timed out with a late reply":     {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut, Reply: ptr.To("late")}, want: &SendOutput{Outcome: "reply", Text: "late"}, wantDone: true},
		"failed":                          {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationFailed}, wantCode: toolerr.DeliveryFailed, wantDone: true},
		"worker gone":                     {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorkerGone}, wantCode: toolerr.WorkerGone, wantDone: true},
		"cancelled":                       {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationCancelled}, want: &SendOutput{Outcome: "cancelled", Text: "the message was withdrawn"}, wantDone: true},
		"open question": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationAsking, Questions: open}, want: &SendOutput{Outcome: "question", Text: "and then?", TurnID: "d.q2"}, wantDone: true,
		},
		"open question the waiter answered": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationAsking, Questions: open}, answered: sets.New("d.q2"),
		},
		"settled with an open question": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorkerGone, Questions: open}, wantCode: toolerr.WorkerGone, wantDone: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err, done := outcomeOf(withStatus("d", tc.status), tc.answered)
			if done != tc.wantDone || codeOf(err) != tc.wantCode {
				t.Fatalf("done %v, error %v; want %v, %q", done, err, tc.wantDone, tc.wantCode)
			}
			if tc.want != nil {
				tc.want.DispatchID, tc.want.Member = "d", "w1"
			}
			if diff := cmp.Diff(tc.want, got, exportAll); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSettledMessage(t *testing.T) {
	d := withStatus("d", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationFailed, Conditions: []metav1.Condition{
		{Type: fleetv1alpha1.ConditionDelivered, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonDeliveryRefused, Message: "herdr: agent_blocked"},
	}})
	_, err, _ := outcomeOf(d, nil)
	if err == nil || err.Message != "herdr: agent_blocked" {
		t.Errorf("error = %v, want the Delivered condition's message", err)
	}
}

func TestAnswerOf(t *testing.T) {
	qs := []fleetv1alpha1.Question{{TurnID: "d.q1", Text: "which?", Answer: ptr.To("that")}, {TurnID: "d.q2", Text: "and?"}}
	cases := map[string]struct {
		status   fleetv1alpha1.DelegationStatus
		turn     string
		want     *AskOutput
		wantCode toolerr.Code
		wantDone bool
	}{
		"answered":          {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking, Questions: qs}, turn: "d.q1", want: &AskOutput{Answer: ptr.To("that"), TurnID: "d.q1"}, wantDone: true},
		"not yet":           {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationAsking, Questions: qs}, turn: "d.q2"},
		"not in the cache":  {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking}, turn: "d.q3"},
		"timed out":         {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut, Questions: qs}, turn: "d.q2", want: &AskOutput{Outcome: "timeout", TurnID: "d.q2"}, wantDone: true},
		"settled otherwise": {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationCancelled, Questions: qs}, turn: "d.q2", wantCode: toolerr.Cancelled, wantDone: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err, done := answerOf(withStatus("d", tc.status), tc.turn)
			if done != tc.wantDone || codeOf(err) != tc.wantCode {
				t.Fatalf("done %v, error %v; want %v, %q", done, err, tc.wantDone, tc.wantCode)
			}
			if diff := cmp.Diff(tc.want, got, exportAll); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHoldTimeout(t *testing.T) {
	cases := map[string]struct {
		ms       *int64
		max      time.Duration
		want     time.Duration
		wantSecs int32
		wantCode toolerr.Code
	}{
		"default":         {max: time.Hour, want: 10 * time.Minute, wantSecs: 600},
		"zero is default": {ms: ptr.To[int64](0), max: time.Hour, want: 10 * time.Minute, wantSecs: 600},
		"given":           {ms: ptr.To[int64](1500), max: time.Hour, want: 1500 * time.Millisecond, wantSecs: 2},
		"capped":          {ms: ptr.To[int64](7_200_000), max: time.Hour, want: time.Hour, wantSecs: 3600},
		"default capped":  {max: time.Minute, want: time.Minute, wantSecs: 60},
		"huge":            {ms: ptr.To[int64](1 << 62), max: 48 * time.Hour, want: 24 * time.Hour, wantSecs: 86400},
		"one millisecond": {ms: ptr.To[int64](1), max: time.Hour, want: time.Millisecond, wantSecs: 1},
		"negative":        {ms: ptr.To[int64](-5), max: time.Hour, wantCode: toolerr.InvalidArgument},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := holdTimeout(tc.ms, tc.max)
			if codeOf(err) != tc.wantCode {
				t.Fatalf("error %v, want %q", err, tc.wantCode)
			}
			if err != nil {
				return
			}
			if got != tc.want || timeoutSeconds(got) != tc.wantSecs {
				t.Errorf("timeout %v (%ds), want %v (%ds)", got, timeoutSeconds(got), tc.want, tc.wantSecs)
			}
		})
	}
}

func TestIdempotentName(t *testing.T) {
	p := fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary"}
	base := idempotentName("ns", p, "k")
	if base != idempotentName("ns", p, "k") {
		t.Fatal("not stable")
	}
	others := []string{
		idempotentName("other", p, "k"),
		idempotentName("ns", fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "primary"}, "k"),
		idempotentName("ns", p, "k2"),
	}
	for _, o := range others {
		if o == base {
			t.Errorf("collision: %s", o)
		}
	}
	if !regexp.MustCompile(`^d-[0-9a-f]{32}$`).MatchString(base) {
		t.Errorf("name %q is not a valid, fixed-size object name", base)
	}
}
