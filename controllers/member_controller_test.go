package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
)

func TestMemberBecomesReadyAndMirrorsAgentStatus(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeProfile("scripted", ns).Command(scriptedAgent).Obj())
	create(t, testutil.MakeMember("w1", ns).Profile("scripted").Obj())

	m := waitReady(t, ns, "w1")
	if m.Status.WorkspaceID == "" || m.Status.TerminalID == "" || m.Status.TokenSecretName == "" {
		t.Errorf("status misses ids: %s workspace=%q terminal=%q secret=%q", describe(m), m.Status.WorkspaceID, m.Status.TerminalID, m.Status.TokenSecretName)
	}
	if m.Status.ObservedGeneration != m.Generation {
		t.Errorf("observedGeneration=%d, generation=%d", m.Status.ObservedGeneration, m.Generation)
	}

	// Drive the agent through every state and watch the Member follow.
	hc := h.client()
	if err := typeInto(hc, m.Status.PaneID, "dialog: approve?"); err != nil {
		t.Fatalf("prompting: %v", err)
	}
	waitAgentStatus(t, ns, "w1", fleetv1alpha1.AgentBlocked)
	if err := hc.PaneSendKeys(context.Background(), m.Status.PaneID, "y"); err != nil {
		t.Fatal(err)
	}
	waitAgentStatus(t, ns, "w1", fleetv1alpha1.AgentIdle)
	if err := typeInto(hc, m.Status.PaneID, "sleep: 3"); err != nil {
		t.Fatalf("prompting: %v", err)
	}
	waitAgentStatus(t, ns, "w1", fleetv1alpha1.AgentWorking)
	final := waitAgentStatus(t, ns, "w1", fleetv1alpha1.AgentIdle)
	if final.Status.StateChangeSeq < 4 {
		t.Errorf("stateChangeSeq=%d after four status changes", final.Status.StateChangeSeq)
	}

	// The pane got the gateway settings and nothing of the controller's own
	// environment; the token never shows on screen.
	secret := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: m.Status.TokenSecretName}, secret); err != nil {
		t.Fatal(err)
	}
	token := string(secret.Data[fleetv1alpha1.TokenSecretKey])
	if len(token) != 64 {
		t.Errorf("token has %d hex digits, want 64 (256 bits)", len(token))
	}
	read, err := hc.PaneRead(context.Background(), herdr.ReadParams{PaneID: m.Status.PaneID, Source: herdr.ReadSourceRecent})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(read.Text, token) {
		t.Errorf("the token is visible in the pane:\n%s", read.Text)
	}
}

func TestDeleteCleansUp(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeMember("gone", ns).Command(scriptedAgent).Obj())
	m := waitReady(t, ns, "gone")
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "member deleted", func() (bool, string) {
		_, err := getMember(t, ns, "gone")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if got := len(workspaces(t, h)); got != 0 {
		t.Errorf("%d workspaces left after delete", got)
	}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: TokenSecretName("gone")}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("token secret still there: %v", err)
	}
}

// TestDeleteWhileHerdrIsDown: a Member whose pane herdr cannot close is
// held by its finalizer, and its status says it is going (phase
// Terminating, Ready False for Deleting), until cleanupTimeout lets it go.
func TestDeleteWhileHerdrIsDown(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeMember("orphaned", ns).Command(scriptedAgent).Obj())
	m := waitReady(t, ns, "orphaned")
	h.stop()
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the member shown terminating", func() (bool, string) {
		m, err := getMember(t, ns, "orphaned")
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionReady)
		return !m.DeletionTimestamp.IsZero() && m.Status.Phase == fleetv1alpha1.MemberTerminating &&
			c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonDeleting, describe(m)
	})
	// Bounded by cleanupTimeout, then released with a Warning.
	testutil.Eventually(t, "member deleted without herdr", func() (bool, string) {
		_, err := getMember(t, ns, "orphaned")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	waitEvent(t, ns, "orphaned", fleetv1alpha1.ReasonCleanupTimedOut)
}

func TestSubscriptionBoundaryRefusesThePane(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	// The API server lets this through (it is only a command line), the
	// controller does not: the endpoint would reach a subscription worker.
	create(t, testutil.MakeMember("smuggler", ns).Command("env", "ANTHROPIC_BASE_URL=http://evil", scriptedAgent).Obj())
	testutil.Eventually(t, "SubscriptionBoundary", func() (bool, string) {
		m, err := getMember(t, ns, "smuggler")
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionReady)
		return c != nil && c.Reason == fleetv1alpha1.ReasonSubscriptionBoundary && m.Status.Phase == fleetv1alpha1.MemberFailed, describe(m)
	})
	waitEvent(t, ns, "smuggler", fleetv1alpha1.ReasonSubscriptionBoundary)
	if got := len(workspaces(t, h)); got != 0 {
		t.Errorf("%d panes created across the subscription boundary", got)
	}
}

func TestFiftyMembersAllReachReady(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 50 agents")
	}
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- env.Client.Create(context.Background(), testutil.MakeMember(fmt.Sprintf("m%02d", i), ns).Command(scriptedAgent).Obj())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("creating a member: %v", err)
		}
	}
	testutil.Eventually(t, "50 members Ready", func() (bool, string) {
		var list fleetv1alpha1.MemberList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, m := range list.Items {
			if meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady) {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d ready", ready, n)
	})
	if got := len(workspaces(t, h)); got != n {
		t.Errorf("%d workspaces for %d members", got, n)
	}
}

// failingReader is an API server that fails every live read.
type failingReader struct{ client.Reader }

func (failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("connection refused")
}

// aheadReader is an API server that holds a newer Member than the cache.
type aheadReader struct{ client.Reader }

func (aheadReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	obj.SetName(key.Name)
	obj.SetNamespace(key.Namespace)
	obj.SetResourceVersion("newer")
	return nil
}

// closedPanes is herdr after the Member's pane was closed.
type closedPanes struct{ PaneClient }

func (closedPanes) AgentGet(context.Context, string) (*herdr.AgentInfo, error) {
	return nil, herdr.ErrNotFound
}

func (closedPanes) PaneRead(context.Context, herdr.ReadParams) (*herdr.PaneRead, error) {
	return nil, herdr.ErrNotFound
}

// TestReconcileReturnsAnErrorOrARequeue: controller-runtime ignores a
// result returned with an error, so a pass that fails says so alone (the
// error's backoff brings it back), and one that waits for the cache asks
// for its requeue alone. Both the paths that check the Member is fresh
// before making a pane are covered: with no pane yet, and with a lost one.
func TestReconcileReturnsAnErrorOrARequeue(t *testing.T) {
	cases := map[string]struct {
		pane        string
		reader      client.Reader
		wantErr     bool
		wantRequeue time.Duration
	}{
		"no pane yet, and the live look fails": {reader: failingReader{}, wantErr: true},
		"no pane yet, and the cache is behind": {reader: aheadReader{}, wantRequeue: staleRetry},
		"a lost pane, and the live look fails": {pane: "w1:p1", reader: failingReader{}, wantErr: true},
		"a lost pane, and the cache is behind": {pane: "w1:p1", reader: aheadReader{}, wantRequeue: staleRetry},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := testutil.MakeMember("w1", "ns").Command("agent").Obj()
			m.UID = "0123456789abcdef"
			m.Finalizers = []string{fleetv1alpha1.MemberFinalizer}
			m.Status.PaneID, m.Status.WorkspaceID = tc.pane, strings.Split(tc.pane, ":")[0]
			c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(m).WithStatusSubresource(m).Build()
			r := &MemberReconciler{
				Client: c, Reader: tc.reader, Panes: closedPanes{}, PaneWatch: NewPaneWatch(closedPanes{}),
				Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(time.Now()), AgentDir: t.TempDir(),
			}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m)})
			if (err != nil) != tc.wantErr {
				t.Fatalf("Reconcile() error = %v, want an error: %v", err, tc.wantErr)
			}
			if err != nil && !res.IsZero() {
				t.Errorf("Reconcile() = %+v with error %v: controller-runtime ignores a result returned with an error", res, err)
			}
			if err == nil && res.RequeueAfter != tc.wantRequeue {
				t.Errorf("Reconcile() requeues after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}
