package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

func TestOwnWritesOverlayQueue(t *testing.T) {
	queue := types.NamespacedName{Namespace: "ns", Name: "w1"}
	at := func(name, rv string, phase fleetv1alpha1.DelegationPhase) fleetv1alpha1.Delegation {
		return fleetv1alpha1.Delegation{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv},
			Spec:       fleetv1alpha1.DelegationSpec{To: "w1"},
			Status:     fleetv1alpha1.DelegationStatus{Phase: phase},
		}
	}
	var own ownWrites
	written := at("d1", "11", fleetv1alpha1.DelegationDelivered)
	own.wrote("10", &written)

	// The cache still shows the version the write replaced: the write is
	// what the look decides on.
	ds := []fleetv1alpha1.Delegation{at("d1", "10", fleetv1alpha1.DelegationQueued), at("d2", "7", fleetv1alpha1.DelegationQueued)}
	own.overlayQueue(queue, ds)
	if ds[0].ResourceVersion != "11" || ds[0].Status.Phase != fleetv1alpha1.DelegationDelivered {
		t.Errorf("stale cache: got %s %s, want the write (11 Delivered)", ds[0].ResourceVersion, ds[0].Status.Phase)
	}
	if ds[1].ResourceVersion != "7" {
		t.Errorf("a Delegation this injector did not write changed: %s", ds[1].ResourceVersion)
	}
	if got := own.current(&fleetv1alpha1.Delegation{ObjectMeta: at("d1", "10", "").ObjectMeta}); got.GetResourceVersion() != "11" {
		t.Errorf("current on the stale version = %s, want 11", got.GetResourceVersion())
	}

	// A second write before the cache showed the first: the cache may
	// still show either version replaced.
	second := at("d1", "12", fleetv1alpha1.DelegationTurnDone)
	own.wrote("11", &second)
	for _, rv := range []string{"10", "11"} {
		ds = []fleetv1alpha1.Delegation{at("d1", rv, fleetv1alpha1.DelegationQueued)}
		own.overlayQueue(queue, ds)
		if ds[0].ResourceVersion != "12" || ds[0].Status.Phase != fleetv1alpha1.DelegationTurnDone {
			t.Errorf("cache at %s after two writes: got %s %s, want the second write (12 TurnDone)", rv, ds[0].ResourceVersion, ds[0].Status.Phase)
		}
	}

	// A version written after this one (a reply) stands, and the record
	// goes: the cache moved past the write.
	ds = []fleetv1alpha1.Delegation{at("d1", "13", fleetv1alpha1.DelegationReplied)}
	own.overlayQueue(queue, ds)
	if ds[0].ResourceVersion != "13" || ds[0].Status.Phase != fleetv1alpha1.DelegationReplied {
		t.Errorf("newer cache: got %s %s, want the cache's (13 Replied)", ds[0].ResourceVersion, ds[0].Status.Phase)
	}
	if len(own.byName) != 0 {
		t.Errorf("records left: %v", own.byName)
	}

	// A Delegation deleted and created again under the same name is not
	// the one written.
	own.wrote("10", &written)
	recreated := at("d1", "10", fleetv1alpha1.DelegationQueued)
	recreated.UID = "other"
	ds = []fleetv1alpha1.Delegation{recreated}
	own.overlayQueue(queue, ds)
	if ds[0].UID != "other" || ds[0].Status.Phase != fleetv1alpha1.DelegationQueued {
		t.Errorf("recreated: got %s %s, want the new object", ds[0].UID, ds[0].Status.Phase)
	}

	// A record of the queue whose Delegation the list no longer holds
	// (deleted) goes; records of other queues stay.
	own.wrote("10", &written)
	other := at("x1", "4", fleetv1alpha1.DelegationDelivered)
	other.Spec.To = "w2"
	own.wrote("3", &other)
	own.overlayQueue(queue, nil)
	if _, ok := own.byName[types.NamespacedName{Namespace: "ns", Name: "d1"}]; ok {
		t.Error("the record of a deleted Delegation stayed")
	}
	if _, ok := own.byName[types.NamespacedName{Namespace: "ns", Name: "x1"}]; !ok {
		t.Error("the record of another queue went")
	}
}
