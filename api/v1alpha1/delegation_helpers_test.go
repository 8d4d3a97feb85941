package v1alpha1_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(seconds int) *metav1.Time {
	return &metav1.Time{Time: epoch.Add(time.Duration(seconds) * time.Second)}
}

func TestUnclaimed(t *testing.T) {
	replied := fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, Reply: ptr.To("done")}
	cases := map[string]struct {
		wait      *bool
		inReplyTo string
		status    fleetv1alpha1.DelegationStatus
		want      bool
	}{
		"detached, settled":                       {wait: ptr.To(false), status: replied, want: true},
		"detached, not settled":                   {wait: ptr.To(false), status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking}},
		"blocking, the waiter got it":             {status: replied},
		"blocking, the waiter left":               {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut, DetachedAt: at(0)}, want: true},
		"acknowledged":                            {wait: ptr.To(false), status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, AcknowledgedAt: at(0)}},
		"late reply after the waiter got timeout": {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut, Reply: ptr.To("late")}, want: true},
		"timeout without a reply, waiter got it":  {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut}},
		"reply on its way to the sender's pane":   {wait: ptr.To(false), status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, Reply: ptr.To("done"), ReplyDeliveredAs: "d-reply"}, want: true},
		"a carrier of a reply":                    {wait: ptr.To(false), inReplyTo: "d", status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTurnDone}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := &fleetv1alpha1.Delegation{Spec: fleetv1alpha1.DelegationSpec{Wait: tc.wait, InReplyTo: tc.inReplyTo}, Status: tc.status}
			if got := d.Unclaimed(); got != tc.want {
				t.Errorf("Unclaimed() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLastChange(t *testing.T) {
	cases := map[string]struct {
		status fleetv1alpha1.DelegationStatus
		want   time.Time
	}{
		"not settled":              {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking}},
		"settled":                  {status: fleetv1alpha1.DelegationStatus{SettledAt: at(5), RepliedAt: at(5)}, want: at(5).Time},
		"a reply after the settle": {status: fleetv1alpha1.DelegationStatus{SettledAt: at(5), RepliedAt: at(9)}, want: at(9).Time},
		"acknowledged last":        {status: fleetv1alpha1.DelegationStatus{SettledAt: at(5), AcknowledgedAt: at(60)}, want: at(60).Time},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := &fleetv1alpha1.Delegation{Status: tc.status}
			if got := d.LastChange(); !got.Equal(tc.want) {
				t.Errorf("LastChange() = %v, want %v", got, tc.want)
			}
		})
	}
}
