package rotation

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keeper keeps this replica's Pod in the rotation while its gateway
// serves, and takes dead peers out (see the package's doc).
type Keeper struct {
	// Client writes Pod status (pods/status in Namespace).
	Client client.Client
	// Pods reads the Pods of Namespace: a cache watching them.
	Pods      client.Reader
	Namespace string
	// Self is this replica's Pod's name; a peer's replica is named after
	// its Pod too.
	Self string
	// Serving reports whether this replica's gateway is ready.
	Serving func() bool
	// Quiet is how long a replica's Lease has gone unrenewed, and whether
	// it is known at all (shard.Keeper.QuietFor); nil knows no Lease, and
	// so judges no peer.
	Quiet  func(replica string, now time.Time) (time.Duration, bool)
	Policy Policy
	// Interval is how often it looks, and each probe's timeout.
	Interval time.Duration
	// Port is the name of the container port a peer's gateway serves on.
	Port  string
	HTTP  *http.Client
	Clock clock.PassiveClock
	Log   logr.Logger
	// Metrics, when set, counts the changes written.
	Metrics *Metrics

	misses map[string]int
}

// DefaultInterval: a look every half second.
const DefaultInterval = 500 * time.Millisecond

// NeedLeaderElection is false: every replica keeps itself in.
func (k *Keeper) NeedLeaderElection() bool { return false }

// Start looks every Interval until ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	t := time.NewTicker(k.Interval)
	defer t.Stop()
	for {
		if err := k.Step(ctx); err != nil && ctx.Err() == nil {
			k.Log.Error(err, "Keeping the gateway's rotation")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Step looks once: probes the suspect peers, and writes what Decide says.
func (k *Keeper) Step(ctx context.Context) error {
	var pods corev1.PodList
	if err := k.Pods.List(ctx, &pods, client.InNamespace(k.Namespace)); err != nil {
		return fmt.Errorf("listing the replicas' pods: %w", err)
	}
	var self *corev1.Pod
	var gated []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case p.Name == k.Self:
			self = p
		case hasGate(p) && p.DeletionTimestamp == nil:
			gated = append(gated, p)
		}
	}
	if self == nil {
		// Not in the cache yet.
		return nil
	}
	now := k.Clock.Now()
	peers := make([]Peer, len(gated))
	for i, p := range gated {
		peers[i] = Peer{Name: p.Name, Ready: conditionTrue(p, corev1.PodReady)}
		if k.Quiet != nil {
			peers[i].Quiet, peers[i].Known = k.Quiet(p.Name, now)
		}
	}
	k.probe(ctx, gated, peers)
	d := Decide(Self{Gated: hasGate(self), Serving: k.Serving(), In: conditionTrue(self, Gate)}, peers, k.Policy)
	if d.SetIn {
		written, err := k.write(ctx, self, corev1.ConditionTrue, "Serving", "its gateway serves", Gate)
		if err != nil {
			return fmt.Errorf("putting this replica in the rotation: %w", err)
		}
		if written {
			k.Metrics.count("in")
			k.Log.Info("In the gateway's rotation")
		}
	}
	for _, name := range d.TakeOut {
		i := indexOf(peers, name)
		p := gated[i]
		msg := fmt.Sprintf("its Lease unrenewed for %s and its gateway not answering %d probes from %s", peers[i].Quiet.Round(100*time.Millisecond), peers[i].Misses, k.Self)
		written, err := k.write(ctx, p, corev1.ConditionFalse, "Unreachable", msg, Gate, corev1.PodReady)
		if err != nil {
			return fmt.Errorf("taking replica %s out of the rotation: %w", name, err)
		}
		if written {
			k.Metrics.count("out")
			k.Log.Info("Took a replica out of the gateway's rotation", "replica", name, "why", msg)
		}
		delete(k.misses, name)
	}
	return nil
}

// probe GETs /readyz of each suspect peer's gateway at once, and counts
// its misses in a row; a peer not suspect starts again from none.
func (k *Keeper) probe(ctx context.Context, pods []*corev1.Pod, peers []Peer) {
	if k.misses == nil {
		k.misses = map[string]int{}
	}
	answered := make([]bool, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		if !k.Policy.Suspect(p) {
			delete(k.misses, p.Name)
			continue
		}
		wg.Go(func() { answered[i] = k.answers(ctx, pods[i]) })
	}
	wg.Wait()
	for i := range peers {
		if !k.Policy.Suspect(peers[i]) {
			continue
		}
		if answered[i] {
			k.misses[peers[i].Name] = 0
		} else {
			k.misses[peers[i].Name]++
		}
		peers[i].Misses = k.misses[peers[i].Name]
	}
	for name := range k.misses {
		if indexOf(peers, name) < 0 {
			delete(k.misses, name)
		}
	}
}

// answers reports whether p's gateway answered /readyz with 200 within
// Interval. A Pod with no address or no such port cannot be probed, and
// so never misses.
func (k *Keeper) answers(ctx context.Context, p *corev1.Pod) bool {
	port := containerPort(p, k.Port)
	if p.Status.PodIP == "" || port == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, k.Interval)
	defer cancel()
	url := "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))) + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := k.HTTP.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// write sets conditions of p to status, conditional on the Pod as read:
// one that changed since, or went, is not written (false), and is looked
// at again at the next step.
func (k *Keeper) write(ctx context.Context, p *corev1.Pod, status corev1.ConditionStatus, reason, message string, kinds ...corev1.PodConditionType) (bool, error) {
	now := metav1.NewTime(k.Clock.Now())
	var conds []corev1.PodCondition
	for _, t := range kinds {
		conds = append(conds, corev1.PodCondition{Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: now})
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": p.ResourceVersion},
		"status":   map[string]any{"conditions": conds},
	})
	if err != nil {
		return false, err
	}
	err = k.Client.Status().Patch(ctx, p, client.RawPatch(types.StrategicMergePatchType, patch))
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func hasGate(p *corev1.Pod) bool {
	for _, g := range p.Spec.ReadinessGates {
		if g.ConditionType == Gate {
			return true
		}
	}
	return false
}

func conditionTrue(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func containerPort(p *corev1.Pod, name string) int32 {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == name {
				return port.ContainerPort
			}
		}
	}
	return 0
}

func indexOf(peers []Peer, name string) int {
	for i, p := range peers {
		if p.Name == name {
			return i
		}
	}
	return -1
}
