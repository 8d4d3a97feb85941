package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// TestJudgeWorkspaceClaim: a kept workspace claim goes to the Member
// incarnation it was made for, never silently to the next Member of the
// same name.
func TestJudgeWorkspaceClaim(t *testing.T) {
	born := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	m := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: "w1", UID: "new-uid", CreationTimestamp: metav1.NewTime(born)}}
	claim := func(uid string, made time.Time, deleting bool) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "w1-workspace", CreationTimestamp: metav1.NewTime(made)}}
		if uid != "" {
			pvc.Labels = map[string]string{fleetv1alpha1.LabelMemberUID: uid}
		}
		if deleting {
			pvc.DeletionTimestamp = &metav1.Time{Time: made}
		}
		return pvc
	}
	cases := map[string]struct {
		pvc  *corev1.PersistentVolumeClaim
		want claimVerdict
	}{
		"made for this member":                      {pvc: claim("new-uid", born.Add(time.Second), false), want: claimOurs},
		"kept from the member of the name before":   {pvc: claim("old-uid", born.Add(-time.Hour), false), want: claimTaken},
		"another uid, even made after":              {pvc: claim("old-uid", born.Add(time.Hour), false), want: claimTaken},
		"no uid, older than the member":             {pvc: claim("", born.Add(-time.Hour), false), want: claimTaken},
		"no uid, made for it by an older fleetd":    {pvc: claim("", born.Add(time.Second), false), want: claimAdopt},
		"the old member's claim, being deleted":     {pvc: claim("old-uid", born.Add(-time.Hour), true), want: claimGoing},
		"handed over: labelled with the member uid": {pvc: claim("new-uid", born.Add(-time.Hour), false), want: claimOurs},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, why := judgeWorkspaceClaim(m, tc.pvc)
			if got != tc.want {
				t.Errorf("judgeWorkspaceClaim = %d (%s), want %d", got, why, tc.want)
			}
			if (got == claimOurs || got == claimAdopt) != (why == "") {
				t.Errorf("verdict %d with reason %q", got, why)
			}
		})
	}
}
