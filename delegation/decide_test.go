package delegation

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

func TestDecide(t *testing.T) {
	now := t0.Add(10 * time.Second)
	refused := func(d *fleetv1alpha1.Delegation) {
		Fail(d, t0, fleetv1alpha1.ReasonDeliveryRefused, "herdr refused the delivery: agent_prompt_failed")
	}
	cases := map[string]struct {
		member Member
		ds     []fleetv1alpha1.Delegation
		now    time.Time
		// restarted: the controller remembers typing none of ds.
		restarted bool
		// moot names question carriers whose question is no longer open.
		moot        sets.Set[string]
		want        []Step
		wantRequeue time.Duration
	}{
		"a carrier of a question no longer open is withdrawn, the next delivered": {
			member: idle(1),
			ds:     []fleetv1alpha1.Delegation{mk("a-q1", 0).queued().obj(), mk("b", time.Second).queued().obj()},
			moot:   sets.New("a-q1"),
			want: []Step{
				{Kind: StepCancel, Name: "a-q1", Reason: fleetv1alpha1.ReasonCancelled, Message: "the question it carries was answered or withdrawn before it could be typed"},
				{Kind: StepDeliver, Name: "b"},
			},
		},
		"a carrier already typed goes on": {
			member: working(2),
			ds:     []fleetv1alpha1.Delegation{mk("a-q1", 0).typed(1).obj()},
			moot:   sets.New("a-q1"), wantRequeue: 50 * time.Second,
			want: []Step{{Kind: StepPickup, Name: "a-q1"}},
		},
		"a new one is delivered to an idle member": {
			member: idle(1),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).obj()},
			want:   []Step{{Kind: StepDeliver, Name: "a"}},
		},
		"done counts as idle": {
			member: with(idle(1), func(m *Member) { m.Status = fleetv1alpha1.AgentDone }),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).queued().obj()},
			want:   []Step{{Kind: StepDeliver, Name: "a"}},
		},
		"a working member receives nothing": {
			member: working(1),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).queued().obj()},
		},
		"a blocked member receives nothing: typing would answer the dialog": {
			member: with(idle(1), func(m *Member) { m.Status = fleetv1alpha1.AgentBlocked }),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).queued().obj()},
		},
		"an unknown status receives nothing": {
			member: with(idle(1), func(m *Member) { m.Status = fleetv1alpha1.AgentUnknown }),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).queued().obj()},
		},
		"a member not ready receives nothing": {
			member: with(idle(1), func(m *Member) { m.Ready = false }),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).queued().obj()},
		},
		"after herdr refused one for a dialog, nothing is typed until the status moves": {
			member: with(idle(4), func(m *Member) { m.BlockedAtSeq = new(int64(4)) }),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).queued().obj()},
		},
		"and once it moved, the queue goes on": {
			member: with(idle(5), func(m *Member) { m.BlockedAtSeq = new(int64(4)) }),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).queued().obj()},
			want:   []Step{{Kind: StepDeliver, Name: "a"}},
		},
		"FIFO by creation, then the gateway's sequence, then name": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{
				mk("z", 2*time.Second).queued().obj(),
				mk("b", 0).seqAnno(900).queued().obj(),
				mk("c", 0).seqAnno(100).queued().obj(),
			},
			want: []Step{{Kind: StepDeliver, Name: "c"}},
		},
		"one in flight gates the next": {
			member: working(2),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).typed(1).then(func(d *fleetv1alpha1.Delegation) { Pickup(d, t0) }).obj(),
				mk("b", time.Second).queued().obj(),
			},
			wantRequeue: 50 * time.Second,
		},
		"the member seen working after the typing is the pickup": {
			member:      working(3),
			ds:          []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			want:        []Step{{Kind: StepPickup, Name: "a"}},
			wantRequeue: 50 * time.Second,
		},
		"blocked on a dialog after the typing is a pickup too": {
			member:      with(working(3), func(m *Member) { m.Status = fleetv1alpha1.AgentBlocked }),
			ds:          []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			want:        []Step{{Kind: StepPickup, Name: "a"}},
			wantRequeue: 50 * time.Second,
		},
		"a status glitch (idle, unknown, idle) is no pickup and no turn done": {
			member:      idle(3),
			ds:          []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			wantRequeue: 50 * time.Second,
		},
		"working seen before the typing is no pickup": {
			member:      with(idle(3), func(m *Member) { m.WorkingSeq = 1 }),
			ds:          []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			wantRequeue: 50 * time.Second,
		},
		"no pickup yet: wait": {
			member:      idle(1),
			ds:          []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			wantRequeue: 50 * time.Second,
		},
		"still working: wait": {
			member:      working(2),
			ds:          []fleetv1alpha1.Delegation{mk("a", 0).typed(1).then(func(d *fleetv1alpha1.Delegation) { Pickup(d, t0) }).obj()},
			wantRequeue: 50 * time.Second,
		},
		"idle after the pickup, no reply: turn done at once, and the next is delivered": {
			member: idleAfterWork(3),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).typed(1).then(func(d *fleetv1alpha1.Delegation) { Pickup(d, t0) }).obj(),
				mk("b", time.Second).queued().obj(),
			},
			want: []Step{{Kind: StepTurnDone, Name: "a", Reason: fleetv1alpha1.ReasonTurnDone}, {Kind: StepDeliver, Name: "b"}},
		},
		"a whole turn between two looks: turn done, which records the pickup": {
			member: idleAfterWork(3),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			want:   []Step{{Kind: StepTurnDone, Name: "a", Reason: fleetv1alpha1.ReasonTurnDone}},
		},
		"an open question never turns done": {
			member: idleAfterWork(5),
			ds: []fleetv1alpha1.Delegation{mk("a", 0).typed(1).then(func(d *fleetv1alpha1.Delegation) {
				if _, err := Ask(d, t0, "which?"); err != nil {
					panic(err)
				}
			}).obj()},
			wantRequeue: 50 * time.Second,
		},
		"replied before its pickup showed: the next waits for it, at most the confirm window": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).typed(1).then(replyAt(8, "done")).obj(),
				mk("b", time.Second).queued().obj(),
			},
			wantRequeue: 8 * time.Second,
		},
		"replied before its pickup showed, the confirm window over: the next goes": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).typed(1).then(replyAt(8, "done")).obj(),
				mk("b", time.Second).queued().obj(),
			},
			now:  t0.Add(18 * time.Second),
			want: []Step{{Kind: StepDeliver, Name: "b"}},
		},
		"replied and the pickup showed: the next goes": {
			member: idleAfterWork(3),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).typed(1).then(replyAt(8, "done")).obj(),
				mk("b", time.Second).queued().obj(),
			},
			want: []Step{{Kind: StepDeliver, Name: "b"}},
		},
		"a refused delivery gates nothing, even with the agent still idle": {
			member: idle(1),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).typed(1).then(refused).obj(),
				mk("b", time.Second).queued().obj(),
			},
			want: []Step{{Kind: StepDeliver, Name: "b"}},
		},
		"queued past its deadline it stays queued": {
			member: working(1),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).queued().obj()},
			now:    t0.Add(5 * time.Minute),
		},
		"and is delivered once the member is idle": {
			member: idle(1),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).queued().obj()},
			now:    t0.Add(5 * time.Minute),
			want:   []Step{{Kind: StepDeliver, Name: "a"}},
		},
		"the deadline passes in flight: timed out": {
			member: working(2),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			now:    t0.Add(2 * time.Minute),
			want:   []Step{{Kind: StepTimeOut, Name: "a", Reason: fleetv1alpha1.ReasonTimedOut}},
		},
		"the member was deleted: in flight and queued are worker_gone": {
			member: Member{Gone: true},
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).typed(1).obj(),
				mk("b", time.Second).queued().obj(),
			},
			want: []Step{
				{Kind: StepWorkerGone, Name: "a", Reason: fleetv1alpha1.ReasonWorkerGone, Message: "member w is gone"},
				{Kind: StepWorkerGone, Name: "b", Reason: fleetv1alpha1.ReasonWorkerGone, Message: "member w is gone"},
			},
		},
		"the pane was lost with one in flight: it is worker_gone, the queue waits for the new pane": {
			member: with(idle(0), func(m *Member) { m.PaneID = "w2:p1"; m.Ready = false }),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).typed(1).obj(),
				mk("b", time.Second).queued().obj(),
			},
			want: []Step{{Kind: StepWorkerGone, Name: "a", Reason: fleetv1alpha1.ReasonWorkerGone, Message: "pane w1:p1 was lost while the message was in it"}},
		},
		"a message in flight in a terminal that is gone is worker_gone": {
			member: with(idle(0), func(m *Member) { m.TerminalID = "term-2" }),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).typed(5).obj()},
			want:   []Step{{Kind: StepWorkerGone, Name: "a", Reason: fleetv1alpha1.ReasonWorkerGone, Message: "pane w1:p1 was lost while the message was in it"}},
		},
		"after a restart, a typing the pickup proves is confirmed, never retyped": {
			member:      working(2),
			ds:          []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			restarted:   true,
			want:        []Step{{Kind: StepPickup, Name: "a"}},
			wantRequeue: 50 * time.Second,
		},
		"after a restart, a status that moved since the typing proves it: nobody watched the turn": {
			member:    idle(3),
			ds:        []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			restarted: true,
			want:      []Step{{Kind: StepTurnDone, Name: "a", Reason: fleetv1alpha1.ReasonTurnDone}},
		},
		"after a restart, an unproven typing waits the confirm window": {
			member:      idle(1),
			ds:          []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			now:         t0.Add(5 * time.Second),
			restarted:   true,
			wantRequeue: 5 * time.Second,
		},
		"then fails, and is never typed again": {
			member:    idle(1),
			ds:        []fleetv1alpha1.Delegation{mk("a", 0).typed(1).obj()},
			now:       t0.Add(20 * time.Second),
			restarted: true,
			want:      []Step{{Kind: StepFail, Name: "a", Reason: fleetv1alpha1.ReasonDeliveryUnconfirmed, Message: "delivery was interrupted and no pickup proves it was typed; it is not typed again"}},
		},
		"the loop guard refuses a long chain of detached replies": {
			member: idle(1),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).queued().then(func(d *fleetv1alpha1.Delegation) { d.Spec.Hops = 4 }).obj()},
			want:   []Step{{Kind: StepFail, Name: "a", Reason: fleetv1alpha1.ReasonLoopGuard, Message: "refused: hop 4 of a chain of messages without a primary's message (limit 3)"}},
		},
		"withdrawn before delivery": {
			member: working(1),
			ds: []fleetv1alpha1.Delegation{mk("a", 0).queued().then(func(d *fleetv1alpha1.Delegation) {
				d.Annotations = map[string]string{fleetv1alpha1.AnnotationCancel: "true"}
			}).obj()},
			want: []Step{{Kind: StepCancel, Name: "a", Reason: fleetv1alpha1.ReasonCancelled, Message: "its sender withdrew it before it was delivered"}},
		},
		"withdrawn in flight: the member's turn is interrupted, even past the deadline": {
			member: working(2),
			ds: []fleetv1alpha1.Delegation{mk("a", 0).typed(1).then(func(d *fleetv1alpha1.Delegation) {
				Pickup(d, t0)
				RequestCancel(d, t0)
			}).obj()},
			now:  t0.Add(5 * time.Minute),
			want: []Step{{Kind: StepInterrupt, Name: "a", Reason: fleetv1alpha1.ReasonCancelled}},
		},
		"withdrawn with kubectl in flight: interrupted too": {
			member: working(2),
			ds: []fleetv1alpha1.Delegation{mk("a", 0).typed(1).then(func(d *fleetv1alpha1.Delegation) {
				d.Annotations = map[string]string{fleetv1alpha1.AnnotationCancel: "true"}
			}).obj()},
			want: []Step{{Kind: StepInterrupt, Name: "a", Reason: fleetv1alpha1.ReasonCancelled}},
		},
		"a detached reply to a member sender is carried back": {
			member: idleAfterWork(3),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").detached().typed(0).then(replyAt(1, "done")).obj()},
			want:   []Step{{Kind: StepCarryReply, Name: "a"}},
		},
		"a detached question to a member sender is carried to it": {
			member: working(2), wantRequeue: 50 * time.Second, // its deadline
			ds:   []fleetv1alpha1.Delegation{mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").detached().typed(1).then(askAt(1, "which way?")).obj()},
			want: []Step{{Kind: StepCarryQuestion, Name: "a"}},
		},
		"a question carried once is not carried again": {
			member: working(2), wantRequeue: 50 * time.Second, // its deadline
			ds: []fleetv1alpha1.Delegation{mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").detached().typed(1).then(askAt(1, "which way?")).then(func(d *fleetv1alpha1.Delegation) {
				QuestionCarried(d, "a-q1")
			}).obj()},
		},
		"a question its member sender waits for stays put": {
			member: working(2), wantRequeue: 50 * time.Second, // its deadline
			ds: []fleetv1alpha1.Delegation{mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").typed(1).then(askAt(1, "which way?")).obj()},
		},
		"a question whose waiter left is carried": {
			member: working(2), wantRequeue: 50 * time.Second, // its deadline
			ds: []fleetv1alpha1.Delegation{mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").typed(1).then(askAt(1, "which way?")).then(func(d *fleetv1alpha1.Delegation) {
				Detach(d, t0.Add(2*time.Second))
			}).obj()},
			want: []Step{{Kind: StepCarryQuestion, Name: "a"}},
		},
		"a detached question to a primary waits for bridge_poll": {
			member: working(2), wantRequeue: 50 * time.Second, // its deadline
			ds: []fleetv1alpha1.Delegation{mk("a", 0).detached().typed(1).then(askAt(1, "which way?")).obj()},
		},
		"a reply someone waits for stays put": {
			member: idleAfterWork(3),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").typed(0).then(replyAt(1, "done")).obj()},
		},
		"a late reply after a timeout is carried back": {
			member: idleAfterWork(3),
			ds: []fleetv1alpha1.Delegation{mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").typed(0).then(func(d *fleetv1alpha1.Delegation) {
				TimeOut(d, t0)
				if err := LateReply(d, t0, "late"); err != nil {
					panic(err)
				}
			}).obj()},
			want: []Step{{Kind: StepCarryReply, Name: "a"}},
		},
		"a late reply after a turn seen to end is carried back": {
			member: idleAfterWork(3),
			ds: []fleetv1alpha1.Delegation{mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").typed(0).then(func(d *fleetv1alpha1.Delegation) {
				TurnDone(d, t0, "$ ")
				if err := LateReply(d, t0, "the real answer"); err != nil {
					panic(err)
				}
			}).obj()},
			want: []Step{{Kind: StepCarryReply, Name: "a"}},
		},
		"a detached reply to a primary waits for bridge_poll": {
			member: idleAfterWork(3),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).detached().typed(0).then(replyAt(1, "done")).obj()},
		},
		"a message typed into a replaced pane gates nothing": {
			member: with(idle(0), func(m *Member) { m.PaneID = "w1:p2" }),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).typed(5).then(replyAt(9, "done")).obj(),
				mk("b", time.Second).queued().obj(),
			},
			want: []Step{{Kind: StepDeliver, Name: "b"}},
		},
		"herdr restarted and reused the pane id: the old message gates nothing": {
			member: with(idle(0), func(m *Member) { m.TerminalID = "term-2" }),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).typed(5).then(replyAt(9, "done")).obj(),
				mk("b", time.Second).queued().obj(),
			},
			want: []Step{{Kind: StepDeliver, Name: "b"}},
		},
		"same pane id, same terminal: it gates": {
			member: idle(5),
			ds: []fleetv1alpha1.Delegation{
				mk("a", 0).typed(5).then(replyAt(9, "done")).obj(),
				mk("b", time.Second).queued().obj(),
			},
			wantRequeue: 9 * time.Second,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			now := cmpOr(tc.now, now)
			typed := typedNames(tc.ds)
			if tc.restarted {
				typed = sets.New[string]()
			}
			dec := Decide(tc.member, tc.ds, now, policy, Seen{Typed: typed, MootCarriers: tc.moot})
			if diff := cmp.Diff(tc.want, dec.Steps); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if dec.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeueAfter=%s, want %s", dec.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}

func cmpOr(t, fallback time.Time) time.Time {
	if t.IsZero() {
		return fallback
	}
	return t
}

func TestDecideRetention(t *testing.T) {
	keep := policy
	keep.Retention = time.Hour
	keep.CancelledRetention = 5 * time.Minute
	cancelled := func(name string) *dlg {
		return mk(name, 0).queued().then(func(d *fleetv1alpha1.Delegation) { RequestCancel(d, at(60).Time) })
	}
	replied := func(name string) *dlg { return mk(name, 0).typed(1).then(replyAt(60, "done")) }
	timedOut := func(d *fleetv1alpha1.Delegation) { TimeOut(d, at(60).Time) }
	cases := map[string]struct {
		member      Member
		ds          []fleetv1alpha1.Delegation
		now         time.Duration
		goneSenders sets.Set[string]
		want        []Step
		wantRequeue time.Duration
	}{
		"a settled reply stays for the retention": {
			member: idleAfterWork(3), ds: []fleetv1alpha1.Delegation{replied("a").obj()},
			now: 31 * time.Minute, wantRequeue: 30 * time.Minute,
		},
		"then it goes": {
			member: idleAfterWork(3), ds: []fleetv1alpha1.Delegation{replied("a").obj()},
			now: 61 * time.Minute, want: []Step{{Kind: StepExpire, Name: "a"}},
		},
		"counted from a late reply and its acknowledgement": {
			member: idleAfterWork(3), ds: []fleetv1alpha1.Delegation{mk("a", 0).typed(1).then(timedOut).then(func(d *fleetv1alpha1.Delegation) {
				if err := LateReply(d, at(20*60).Time, "late"); err != nil {
					panic(err)
				}
				if _, err := Acknowledge(d, at(30*60).Time); err != nil {
					panic(err)
				}
			}).obj()},
			now: 61 * time.Minute, wantRequeue: 29 * time.Minute,
		},
		"a cancelled one stays for the cancelled retention": {
			member: idleAfterWork(3), ds: []fleetv1alpha1.Delegation{cancelled("a").obj()},
			now: 5 * time.Minute, wantRequeue: time.Minute,
		},
		"then it goes, long before the retention": {
			member: idleAfterWork(3), ds: []fleetv1alpha1.Delegation{cancelled("a").obj()},
			now: 6*time.Minute + time.Second, want: []Step{{Kind: StepExpire, Name: "a"}},
		},
		"a cancelled outcome nobody collected stays until acknowledged": {
			member: idleAfterWork(3), ds: []fleetv1alpha1.Delegation{cancelled("a").detached().obj()},
			now: 100 * time.Hour,
		},
		"an outcome nobody collected stays until acknowledged": {
			member: idleAfterWork(3), ds: []fleetv1alpha1.Delegation{replied("a").detached().obj()},
			now: 100 * time.Hour,
		},
		"an acknowledged one goes a retention after the ack": {
			member: idleAfterWork(3), ds: []fleetv1alpha1.Delegation{replied("a").detached().then(func(d *fleetv1alpha1.Delegation) {
				if _, err := Acknowledge(d, t0.Add(100*time.Hour)); err != nil {
					panic(err)
				}
			}).obj()},
			now: 101 * time.Hour, want: []Step{{Kind: StepExpire, Name: "a"}},
		},
		"an outcome owed to a member that is gone goes": {
			member: idleAfterWork(3), goneSenders: sets.New("lead"),
			ds:  []fleetv1alpha1.Delegation{mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").detached().typed(1).then(timedOut).obj()},
			now: 2 * time.Hour, want: []Step{{Kind: StepExpire, Name: "a"}},
		},
		"an outcome of a kubectl user is not owed through the gateway": {
			member: idleAfterWork(3),
			ds:     []fleetv1alpha1.Delegation{replied("a").from(fleetv1alpha1.PrincipalUser, "alice").detached().obj()},
			now:    2 * time.Hour, want: []Step{{Kind: StepExpire, Name: "a"}},
		},
		"an outcome owed to a member that is there stays": {
			member: idleAfterWork(3), goneSenders: sets.New("other"),
			ds:  []fleetv1alpha1.Delegation{mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").detached().typed(1).then(timedOut).obj()},
			now: 2 * time.Hour,
		},
		"a reply for a member sender is carried first": {
			member: idleAfterWork(3),
			ds:     []fleetv1alpha1.Delegation{replied("a").from(fleetv1alpha1.PrincipalMember, "lead").detached().obj()},
			now:    2 * time.Hour, want: []Step{{Kind: StepCarryReply, Name: "a"}},
		},
		"the last one typed stays while it gates the next": {
			member: idle(1), ds: []fleetv1alpha1.Delegation{mk("a", 0).typed(1).then(replyAt(60, "done")).obj()},
			now: 65 * time.Second, wantRequeue: 5 * time.Second,
		},
		"old ones go while the queue moves on": {
			member: idleAfterWork(3),
			ds:     []fleetv1alpha1.Delegation{replied("a").obj(), mk("b", 2*time.Hour).queued().obj()},
			now:    2 * time.Hour, want: []Step{{Kind: StepExpire, Name: "a"}, {Kind: StepDeliver, Name: "b"}},
		},
		"nothing in flight is touched": {
			member: working(2),
			ds:     []fleetv1alpha1.Delegation{mk("a", 0).typed(1).then(func(d *fleetv1alpha1.Delegation) { Pickup(d, t0) }).obj()},
			now:    30 * time.Second, wantRequeue: 30 * time.Second,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dec := Decide(tc.member, tc.ds, t0.Add(tc.now), keep, Seen{Typed: typedNames(tc.ds), GoneSenders: tc.goneSenders})
			if diff := cmp.Diff(tc.want, dec.Steps); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if dec.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeueAfter=%s, want %s", dec.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}
