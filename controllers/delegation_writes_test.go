package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// TestOwnWrites: a Delegation the injector wrote replaces the cache's copy
// while the cache shows a version the write replaced, and only then.
func TestOwnWrites(t *testing.T) {
	t0 := time.Now()
	version := func(rv string, phase fleetv1alpha1.DelegationPhase) fleetv1alpha1.Delegation {
		return fleetv1alpha1.Delegation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "d", ResourceVersion: rv}, Status: fleetv1alpha1.DelegationStatus{Phase: phase}}
	}
	// The injector wrote 1 -> 2 (Delivered), then 2 -> 3 (TurnDone).
	wrote := func() *ownWrites {
		w := &ownWrites{}
		d2, d3 := version("2", fleetv1alpha1.DelegationDelivered), version("3", fleetv1alpha1.DelegationTurnDone)
		w.wrote("1", &d2, t0)
		w.wrote("2", &d3, t0)
		return w
	}
	cases := map[string]struct {
		cached    fleetv1alpha1.Delegation
		now       time.Time
		wantRV    string
		forgotten bool
	}{
		"the cache before both writes":     {cached: version("1", fleetv1alpha1.DelegationQueued), now: t0, wantRV: "3"},
		"the cache between them":           {cached: version("2", fleetv1alpha1.DelegationDelivered), now: t0, wantRV: "3"},
		"the cache caught up":              {cached: version("3", fleetv1alpha1.DelegationTurnDone), now: t0, wantRV: "3", forgotten: true},
		"someone wrote after the injector": {cached: version("4", fleetv1alpha1.DelegationReplied), now: t0, wantRV: "4", forgotten: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := wrote()
			ds := []fleetv1alpha1.Delegation{tc.cached}
			w.overlay(ds, tc.now)
			if ds[0].ResourceVersion != tc.wantRV {
				t.Errorf("decided on version %s, want %s", ds[0].ResourceVersion, tc.wantRV)
			}
			if _, kept := w.byID[client.ObjectKeyFromObject(&tc.cached)]; kept == tc.forgotten {
				t.Errorf("remembered %v, want %v", kept, !tc.forgotten)
			}
		})
	}
	// What is not listed any more (deleted meanwhile) is forgotten in time.
	w := wrote()
	w.overlay([]fleetv1alpha1.Delegation{}, t0.Add(ownWritesTTL/2))
	if len(w.byID) != 1 {
		t.Errorf("forgot a write too soon")
	}
	w.overlay([]fleetv1alpha1.Delegation{}, t0.Add(2*ownWritesTTL))
	if len(w.byID) != 0 {
		t.Errorf("kept a write of a Delegation no longer listed past %s", ownWritesTTL)
	}
}
