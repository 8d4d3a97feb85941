package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

var (
	t0     = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	policy = DeliveryPolicy{SettleWindow: 2 * time.Second, ConfirmWindow: 10 * time.Second, MaxHops: 3}
)

// dlg builds a Delegation created at t0+offset with a 60 s deadline.
type dlg struct{ fleetv1alpha1.Delegation }

func mk(name string, offset time.Duration) *dlg {
	d := &dlg{}
	d.Name = name
	d.CreationTimestamp = metav1.NewTime(t0.Add(offset))
	d.Spec = fleetv1alpha1.DelegationSpec{From: fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "p"}, To: "w", Content: "hi", TimeoutSeconds: 60}
	return d
}

// phase sets the phase; a terminal one is recorded as settled, as the
// controller leaves it.
func (d *dlg) phase(p fleetv1alpha1.DelegationPhase) *dlg {
	d.Status.Phase = p
	if p.IsTerminal() {
		d.Status.Conditions = []metav1.Condition{{Type: fleetv1alpha1.ConditionSettled, Status: metav1.ConditionTrue, Reason: string(p)}}
	}
	return d
}

// typed marks it typed into pane w1:p1 at seq.
func (d *dlg) typed(seq int64) *dlg {
	at := metav1.NewTime(t0)
	d.Status.DeliveringAt, d.Status.DeliveredAt = &at, &at
	d.Status.DeliveringSeq, d.Status.PaneID, d.Status.TerminalID = seq, "w1:p1", "term-1"
	if d.Status.Phase == "" {
		d.Status.Phase = fleetv1alpha1.DelegationDelivered
	}
	return d
}

// intent marks an intent to type without a confirmation.
func (d *dlg) intent(seq int64, at time.Time) *dlg {
	t := metav1.NewTime(at)
	d.Status.DeliveringAt, d.Status.DeliveringSeq, d.Status.PaneID = &t, seq, "w1:p1"
	d.Status.Phase = fleetv1alpha1.DelegationQueued
	return d
}

func (d *dlg) seqAnno(ns int) *dlg {
	d.Annotations = map[string]string{fleetv1alpha1.AnnotationSequence: t0.Add(time.Duration(ns)).Format(time.RFC3339Nano)}
	return d
}

func (d *dlg) obj() fleetv1alpha1.Delegation { return d.Delegation }

func idle(seq int64) MemberView {
	return MemberView{Ready: true, PaneID: "w1:p1", Status: fleetv1alpha1.AgentIdle, Since: t0, Seq: seq}
}

func with(m MemberView, f func(*MemberView)) MemberView { f(&m); return m }

func TestDecide(t *testing.T) {
	now := t0.Add(10 * time.Second)
	cases := map[string]struct {
		member MemberView
		ds     []fleetv1alpha1.Delegation
		now    time.Time
		want   []Step
		// wantInFlight and wantDepth check the member's queue fields.
		wantInFlight string
		wantDepth    int32
		wantRequeue  time.Duration
	}{
		"pending is queued and delivered to an idle member": {
			member:       idle(1),
			ds:           []fleetv1alpha1.Delegation{mk("a", 0).obj()},
			want:         []Step{{Kind: StepDeliver, Name: "a"}},
			wantInFlight: "a", wantRequeue: 50 * time.Second,
		},
		"done counts as idle": {
			member:       with(idle(1), func(m *MemberView) { m.Status = fleetv1alpha1.AgentDone }),
			ds:           []fleetv1alpha1.Delegation{mk("a", 0).phase(fleetv1alpha1.DelegationQueued).obj()},
			want:         []Step{{Kind: StepDeliver, Name: "a"}},
			wantInFlight: "a", wantRequeue: 50 * time.Second,
		},
		"working member receives nothing": {
			member:    with(idle(1), func(m *MemberView) { m.Status = fleetv1alpha1.AgentWorking }),
			ds:        []fleetv1alpha1.Delegation{mk("a", 0).phase(fleetv1alpha1.DelegationQueued).obj()},
			wantDepth: 1, wantRequeue: 50 * time.Second,
		},
		"blocked member receives nothing: typing would answer the dialog": {
			member:    with(idle(1), func(m *MemberView) { m.Status = fleetv1alpha1.AgentBlocked }),
			ds:        []fleetv1alpha1.Delegation{mk("a", 0).phase(fleetv1alpha1.DelegationQueued).obj()},
			wantDepth: 1, wantRequeue: 50 * time.Second,
		},
		"unknown status receives nothing": {
			member:    with(idle(1), func(m *MemberView) { m.Status = fleetv1alpha1.AgentUnknown }),
			ds:        []fleetv1alpha1.Delegation{mk("a", 0).phase(fleetv1alpha1.DelegationQueued).obj()},
			wantDepth: 1, wantRequeue: 50 * time.Second,
		},
		"member not ready receives nothing": {
			member:    with(idle(1), func(m *MemberView) { m.Ready = false }),
			ds:        []fleetv1alpha1.Delegation{mk("a", 0).phase(fleetv1alpha1.DelegationQueued).obj()},
			wantDepth: 1, wantRequeue: 50 * time.Second,
		},
		"FIFO by creation, then the gateway's sequence, then name": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{
				mk("z", 2*time.Second).phase(fleetv1alpha1.DelegationQueued).obj(),
				mk("b", 0).seqAnno(900).phase(fleetv1alpha1.DelegationQueued).obj(),
				mk("c", 0).seqAnno(100).phase(fleetv1alpha1.DelegationQueued).obj(),
			},
			want:         []Step{{Kind: StepDeliver, Name: "c"}},
			wantInFlight: "c", wantDepth: 2, wantRequeue: 50 * time.Second,
		},
		"one in flight blocks the next": {
			member: with(idle(2), func(m *MemberView) { m.Status = fleetv1alpha1.AgentWorking }),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).phase(fleetv1alpha1.DelegationWorking).typed(1).obj(),
				mk("b", time.Second).phase(fleetv1alpha1.DelegationQueued).obj(),
			},
			wantInFlight: "a", wantDepth: 1, wantRequeue: 50 * time.Second,
		},
		"a seq that advanced is the pickup, even if the turn fell between samples": {
			member:       with(idle(3), func(m *MemberView) { m.Status = fleetv1alpha1.AgentWorking }),
			ds:           []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			want:         []Step{{Kind: StepPickup, Name: "a"}},
			wantInFlight: "a", wantRequeue: 50 * time.Second,
		},
		"no pickup yet: wait": {
			member:       idle(1),
			ds:           []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			wantInFlight: "a", wantRequeue: 50 * time.Second,
		},
		"idle again after the pickup, inside the settle window: wait for a racing reply": {
			member:       with(idle(3), func(m *MemberView) { m.Since = now.Add(-time.Second) }),
			ds:           []fleetv1alpha1.Delegation{mk("a", 0).phase(fleetv1alpha1.DelegationWorking).typed(1).obj()},
			wantInFlight: "a", wantRequeue: time.Second,
		},
		"idle past the settle window without a reply: turn done, and the next is delivered": {
			member: idle(3),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).phase(fleetv1alpha1.DelegationWorking).typed(1).obj(),
				mk("b", time.Second).phase(fleetv1alpha1.DelegationQueued).obj(),
			},
			want:         []Step{{Kind: StepTurnDone, Name: "a"}, {Kind: StepDeliver, Name: "b"}},
			wantInFlight: "b", wantRequeue: 50 * time.Second,
		},
		"delivered and already idle again: pickup and turn done together": {
			member:      idle(3),
			ds:          []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			want:        []Step{{Kind: StepPickup, Name: "a"}, {Kind: StepTurnDone, Name: "a"}},
			wantRequeue: 50 * time.Second,
		},
		"asking never turns done": {
			member:       idle(5),
			ds:           []fleetv1alpha1.Delegation{mk("a", 0).phase(fleetv1alpha1.DelegationAsking).typed(1).obj()},
			wantInFlight: "a", wantRequeue: 50 * time.Second,
		},
		"replied, but the member's seq has not shown the pickup yet: do not type the next": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).phase(fleetv1alpha1.DelegationReplied).typed(1).obj(),
				mk("b", time.Second).phase(fleetv1alpha1.DelegationQueued).obj(),
			},
			wantDepth: 1, wantRequeue: 51 * time.Second,
		},
		"replied and the seq moved: the next goes": {
			member: idle(3),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).phase(fleetv1alpha1.DelegationReplied).typed(1).obj(),
				mk("b", time.Second).phase(fleetv1alpha1.DelegationQueued).obj(),
			},
			want:         []Step{{Kind: StepDeliver, Name: "b"}},
			wantInFlight: "b", wantRequeue: 51 * time.Second,
		},
		"a refused delivery holds the queue until herdr reports a new status": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{
				func() fleetv1alpha1.Delegation {
					d := mk("a", 0).intent(1, t0).phase(fleetv1alpha1.DelegationFailed)
					d.Status.Conditions = append(d.Status.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionDelivered, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonDeliveryRefused})
					return d.obj()
				}(),
				mk("b", time.Second).phase(fleetv1alpha1.DelegationQueued).obj(),
			},
			wantDepth: 1, wantRequeue: 51 * time.Second,
		},
		"a reply the gateway recorded gets its conditions": {
			member: idle(3),
			ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := mk("a", 0).typed(1)
				d.Status.Phase = fleetv1alpha1.DelegationReplied
				d.Status.Reply = ptr.To("done")
				return d.obj()
			}()},
			want: []Step{{Kind: StepRecord, Name: "a"}},
		},
		"deadline passed while queued: withdrawn as timeout": {
			member: with(idle(1), func(m *MemberView) { m.Status = fleetv1alpha1.AgentWorking }),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).phase(fleetv1alpha1.DelegationQueued).obj()},
			now:    t0.Add(time.Minute),
			want:   []Step{{Kind: StepSettle, Name: "a", Phase: fleetv1alpha1.DelegationTimedOut, Outcome: fleetv1alpha1.OutcomeTimeout, Reason: fleetv1alpha1.ReasonTimedOut, Message: "the deadline passed before the message was delivered; it was withdrawn"}},
		},
		"deadline passed in flight": {
			member: with(idle(2), func(m *MemberView) { m.Status = fleetv1alpha1.AgentWorking }),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).phase(fleetv1alpha1.DelegationWorking).typed(1).obj()},
			now:    t0.Add(2 * time.Minute),
			want:   []Step{{Kind: StepSettle, Name: "a", Phase: fleetv1alpha1.DelegationTimedOut, Outcome: fleetv1alpha1.OutcomeTimeout, Reason: fleetv1alpha1.ReasonTimedOut, Message: "the deadline passed; a later reply takes the detached path"}},
		},
		"member deleted: in flight and queued are worker_gone": {
			member: MemberView{Gone: true},
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).phase(fleetv1alpha1.DelegationWorking).typed(1).obj(),
				mk("b", time.Second).phase(fleetv1alpha1.DelegationQueued).obj(),
			},
			want: []Step{
				{Kind: StepSettle, Name: "a", Phase: fleetv1alpha1.DelegationWorkerGone, Outcome: fleetv1alpha1.OutcomeWorkerGone, Reason: fleetv1alpha1.ReasonWorkerGone, Message: "member w is gone"},
				{Kind: StepSettle, Name: "b", Phase: fleetv1alpha1.DelegationWorkerGone, Outcome: fleetv1alpha1.OutcomeWorkerGone, Reason: fleetv1alpha1.ReasonWorkerGone, Message: "member w is gone"},
			},
		},
		"pane lost with one in flight: it is worker_gone, the queue waits for the new pane": {
			member: with(idle(0), func(m *MemberView) { m.PaneID = "w2:p1"; m.Ready = false }),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).phase(fleetv1alpha1.DelegationWorking).typed(1).obj(),
				mk("b", time.Second).phase(fleetv1alpha1.DelegationQueued).obj(),
			},
			want:      []Step{{Kind: StepSettle, Name: "a", Phase: fleetv1alpha1.DelegationWorkerGone, Outcome: fleetv1alpha1.OutcomeWorkerGone, Reason: fleetv1alpha1.ReasonWorkerGone, Message: "pane w1:p1 was lost while the message was in it"}},
			wantDepth: 1, wantRequeue: 51 * time.Second,
		},
		"interrupted delivery proven by a pickup is confirmed, never retyped": {
			member:       idle(2),
			ds:           []fleetv1alpha1.Delegation{mk("a", 0).intent(1, t0).obj()},
			want:         []Step{{Kind: StepConfirm, Name: "a"}},
			wantInFlight: "a",
		},
		"interrupted delivery inside the confirm window: wait": {
			member:       idle(1),
			ds:           []fleetv1alpha1.Delegation{mk("a", 0).intent(1, now.Add(-5*time.Second)).obj()},
			wantInFlight: "a", wantRequeue: 5 * time.Second,
		},
		"interrupted delivery without a pickup: failed, not retyped": {
			member: idle(1),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).intent(1, t0).obj()},
			now:    t0.Add(20 * time.Second),
			want:   []Step{{Kind: StepSettle, Name: "a", Phase: fleetv1alpha1.DelegationFailed, Outcome: fleetv1alpha1.OutcomeDeliveryFailed, Reason: fleetv1alpha1.ReasonDeliveryUnconfirmed, Message: "delivery was interrupted and no pickup proves it was typed; it is not typed again"}},
		},
		"loop guard refuses a long chain of detached replies": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := mk("a", 0).phase(fleetv1alpha1.DelegationQueued)
				d.Spec.Hops = 4
				return d.obj()
			}()},
			want: []Step{{Kind: StepSettle, Name: "a", Phase: fleetv1alpha1.DelegationFailed, Outcome: fleetv1alpha1.OutcomeDeliveryFailed, Reason: fleetv1alpha1.ReasonLoopGuard, Message: "refused: 4 detached replies in a row without a primary's message (limit 3)"}},
		},
		"cancelled before delivery": {
			member: with(idle(1), func(m *MemberView) { m.Status = fleetv1alpha1.AgentWorking }),
			ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := mk("a", 0).phase(fleetv1alpha1.DelegationQueued)
				d.Annotations = map[string]string{fleetv1alpha1.AnnotationCancel: "true"}
				return d.obj()
			}()},
			want: []Step{{Kind: StepSettle, Name: "a", Phase: fleetv1alpha1.DelegationCancelled, Outcome: fleetv1alpha1.OutcomeCancelled, Reason: fleetv1alpha1.ReasonCancelled, Message: "withdrawn before delivery"}},
		},
		"a detached reply from a member sender is carried back": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := mk("a", 0).phase(fleetv1alpha1.DelegationReplied).typed(0)
				d.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "lead"}
				d.Spec.Wait = ptr.To(false)
				d.Status.Reply = ptr.To("done")
				return d.obj()
			}()},
			want: []Step{{Kind: StepDetachedReply, Name: "a"}},
		},
		"a reply someone waits for stays put": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := mk("a", 0).phase(fleetv1alpha1.DelegationReplied).typed(0)
				d.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "lead"}
				d.Status.Reply = ptr.To("done")
				return d.obj()
			}()},
		},
		"a late reply after a timeout is carried back": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := mk("a", 0).phase(fleetv1alpha1.DelegationTimedOut).typed(0)
				d.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "lead"}
				d.Status.Reply = ptr.To("late")
				return d.obj()
			}()},
			want: []Step{{Kind: StepDetachedReply, Name: "a"}},
		},
		"a message typed into a replaced pane does not hold back the new one": {
			member: with(idle(0), func(m *MemberView) { m.PaneID = "w1:p2" }),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).phase(fleetv1alpha1.DelegationReplied).typed(5).obj(),
				mk("b", time.Second).phase(fleetv1alpha1.DelegationQueued).obj(),
			},
			want:         []Step{{Kind: StepDeliver, Name: "b"}},
			wantInFlight: "b", wantRequeue: 51 * time.Second,
		},
		"herdr restarted and reused the pane id: the old message holds nothing back": {
			member: with(idle(0), func(m *MemberView) { m.TerminalID = "term-2" }),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).phase(fleetv1alpha1.DelegationReplied).typed(5).obj(),
				mk("b", time.Second).phase(fleetv1alpha1.DelegationQueued).obj(),
			},
			want:         []Step{{Kind: StepDeliver, Name: "b"}},
			wantInFlight: "b", wantRequeue: 51 * time.Second,
		},
		"same pane id, same terminal: the gate holds": {
			member: with(idle(5), func(m *MemberView) { m.TerminalID = "term-1" }),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).phase(fleetv1alpha1.DelegationReplied).typed(5).obj(),
				mk("b", time.Second).phase(fleetv1alpha1.DelegationQueued).obj(),
			},
			wantDepth: 1, wantRequeue: 51 * time.Second,
		},
		"a message in flight in a terminal that is gone is worker_gone": {
			member: with(idle(0), func(m *MemberView) { m.TerminalID = "term-2" }),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).phase(fleetv1alpha1.DelegationWorking).typed(5).obj()},
			want: []Step{{Kind: StepSettle, Name: "a", Phase: fleetv1alpha1.DelegationWorkerGone, Outcome: fleetv1alpha1.OutcomeWorkerGone,
				Reason: fleetv1alpha1.ReasonWorkerGone, Message: "pane w1:p1 was lost while the message was in it"}},
		},
		"a detached reply to a primary waits for bridge_poll": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := mk("a", 0).phase(fleetv1alpha1.DelegationReplied).typed(0)
				d.Spec.Wait = ptr.To(false)
				d.Status.Reply = ptr.To("done")
				return d.obj()
			}()},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			at := tc.now
			if at.IsZero() {
				at = now
			}
			dec := Decide(tc.member, tc.ds, at, policy, nil)
			if diff := cmp.Diff(tc.want, dec.Steps); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if dec.InFlight != tc.wantInFlight || dec.QueueDepth != tc.wantDepth {
				t.Errorf("inFlight=%q depth=%d, want %q and %d", dec.InFlight, dec.QueueDepth, tc.wantInFlight, tc.wantDepth)
			}
			if dec.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeueAfter=%s, want %s", dec.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}

// settled stamps when it settled.
func (d *dlg) settled(at time.Duration) *dlg {
	t := metav1.NewTime(t0.Add(at))
	d.Status.SettledAt = &t
	return d
}

func TestDecideRetention(t *testing.T) {
	keep := policy
	keep.Retention = time.Hour
	replied := func(name string) *dlg {
		d := mk(name, 0).phase(fleetv1alpha1.DelegationReplied).typed(1).settled(time.Minute)
		d.Status.Reply = ptr.To("done")
		return d
	}
	cases := map[string]struct {
		member      MemberView
		ds          []fleetv1alpha1.Delegation
		now         time.Duration
		goneSenders sets.Set[string]
		want        []Step
		wantRequeue time.Duration
	}{
		"a settled reply stays for the retention": {
			member: idle(2), ds: []fleetv1alpha1.Delegation{replied("a").obj()},
			now: 31 * time.Minute, wantRequeue: 30 * time.Minute,
		},
		"then it goes": {
			member: idle(2), ds: []fleetv1alpha1.Delegation{replied("a").obj()},
			now: 61 * time.Minute, want: []Step{{Kind: StepExpire, Name: "a"}},
		},
		"counted from a late reply": {
			member: idle(2), ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := mk("a", 0).phase(fleetv1alpha1.DelegationTimedOut).typed(1).settled(time.Minute)
				d.Status.Reply, d.Status.RepliedAt, d.Status.AcknowledgedAt = ptr.To("late"), &metav1.Time{Time: t0.Add(20 * time.Minute)}, &metav1.Time{Time: t0.Add(30 * time.Minute)}
				return d.obj()
			}()},
			now: 61 * time.Minute, wantRequeue: 29 * time.Minute,
		},
		"an outcome nobody collected stays until acknowledged": {
			member: idle(2), ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := replied("a")
				d.Spec.Wait = ptr.To(false)
				return d.obj()
			}()},
			now: 100 * time.Hour,
		},
		"an acknowledged one goes a retention after the ack": {
			member: idle(2), ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := replied("a")
				d.Spec.Wait = ptr.To(false)
				d.Status.AcknowledgedAt = &metav1.Time{Time: t0.Add(100 * time.Hour)}
				return d.obj()
			}()},
			now: 101 * time.Hour, want: []Step{{Kind: StepExpire, Name: "a"}},
		},
		"an outcome owed to a member that is gone goes": {
			member: idle(2), goneSenders: sets.New("lead"), ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := mk("a", 0).phase(fleetv1alpha1.DelegationTimedOut).typed(1).settled(time.Minute)
				d.Spec.Wait = ptr.To(false)
				d.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "lead"}
				return d.obj()
			}()},
			now: 2 * time.Hour, want: []Step{{Kind: StepExpire, Name: "a"}},
		},
		"an outcome of a kubectl user is not owed through the gateway": {
			member: idle(2), ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := replied("a")
				d.Spec.Wait = ptr.To(false)
				d.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalUser, Name: "alice"}
				return d.obj()
			}()},
			now: 2 * time.Hour, want: []Step{{Kind: StepExpire, Name: "a"}},
		},
		"an outcome owed to a member that is there stays": {
			member: idle(2), goneSenders: sets.New("other"), ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := mk("a", 0).phase(fleetv1alpha1.DelegationTimedOut).typed(1).settled(time.Minute)
				d.Spec.Wait = ptr.To(false)
				d.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "lead"}
				return d.obj()
			}()},
			now: 2 * time.Hour,
		},
		"a reply for a member sender is carried first": {
			member: idle(2), ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := replied("a")
				d.Spec.Wait = ptr.To(false)
				d.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "lead"}
				return d.obj()
			}()},
			now: 2 * time.Hour, want: []Step{{Kind: StepDetachedReply, Name: "a"}},
		},
		"a gateway settle is recorded first": {
			member: idle(2), ds: []fleetv1alpha1.Delegation{func() fleetv1alpha1.Delegation {
				d := replied("a")
				d.Status.Conditions = nil
				return d.obj()
			}()},
			now: 2 * time.Hour, want: []Step{{Kind: StepRecord, Name: "a"}},
		},
		"the last one typed stays while its pickup has not shown": {
			member: idle(1), ds: []fleetv1alpha1.Delegation{replied("a").obj()},
			now: 2 * time.Hour,
		},
		"unless its member is gone": {
			member: MemberView{Gone: true, Seq: 1}, ds: []fleetv1alpha1.Delegation{replied("a").obj()},
			now: 2 * time.Hour, want: []Step{{Kind: StepExpire, Name: "a"}},
		},
		"old ones go while the queue moves on": {
			member: idle(2),
			ds:     []fleetv1alpha1.Delegation{replied("a").obj(), mk("b", 2*time.Hour).obj()},
			now:    2 * time.Hour, want: []Step{{Kind: StepExpire, Name: "a"}, {Kind: StepDeliver, Name: "b"}},
			wantRequeue: time.Minute,
		},
		"nothing in flight is touched": {
			member: with(idle(2), func(m *MemberView) { m.Status = fleetv1alpha1.AgentWorking }),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).phase(fleetv1alpha1.DelegationWorking).typed(1).obj()},
			now:    30 * time.Second, wantRequeue: 30 * time.Second,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dec := Decide(tc.member, tc.ds, t0.Add(tc.now), keep, tc.goneSenders)
			if diff := cmp.Diff(tc.want, dec.Steps); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if dec.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeueAfter=%s, want %s", dec.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}
