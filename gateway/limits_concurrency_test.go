package gateway

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// Every bound holds however many calls arrive at once: the calls below all
// start together through the real MCP client, and what reaches the API
// server is counted there.

// concurrently runs n calls of tool with args(i) at once on one session
// each caller shares, and returns how many succeeded and the codes of the
// refusals.
func concurrently[T any](t *testing.T, h *harness, token, tool string, n int, args func(i int) any) (ok int, refused map[toolerr.Code]int) {
	t.Helper()
	cs := h.connect(t, token, nil)
	chans := make([]<-chan toolCall[T], n)
	for i := range n {
		chans[i] = async[T](t, context.Background(), cs, tool, args(i))
	}
	refused = map[toolerr.Code]int{}
	for _, ch := range chans {
		got := receive(t, ch)
		if got.err != nil {
			refused[got.err.Code]++
			continue
		}
		ok++
	}
	return ok, refused
}

// TestConcurrentSpawnsStayWithinTheBound: forty bridge_spawn calls at once
// from one member start no more members than MaxSpawns allows, and the
// rest are refused spawn_limit.
func TestConcurrentSpawnsStayWithinTheBound(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxSpawns: 16})
	create(t, testutil.MakeProfile("scripted", ns).Command("scripted-agent").Default().Obj())
	_, token := addMember(t, member("spawner", ns).Obj())

	ok, refused := concurrently[SpawnOutput](t, h, token, "bridge_spawn", 40, func(int) any { return nil })

	var list fleetv1alpha1.MemberList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	spawned := 0
	for _, m := range list.Items {
		if m.Annotations[fleetv1alpha1.AnnotationSpawnedBy] == "Member:spawner" {
			spawned++
		}
	}
	if spawned > 16 || ok != spawned {
		t.Errorf("40 spawns at once: %d succeeded and %d members exist, want both at most 16", ok, spawned)
	}
	if refused[toolerr.SpawnLimit] != 40-ok {
		t.Errorf("refusals %v, want every one of the %d spawn_limit", refused, 40-ok)
	}
}
