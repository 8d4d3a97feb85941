package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/test/framework/localcluster"
)

// logKeeper keeps every member Pod's received log open from when it
// first exists: a Pod deleted, or on a node that lost its power, takes
// its emptyDir with it once the kubelet cleans up, and an open file
// outlives that. What the agents received is read from these files at the
// end, every Pod of a member together.
type logKeeper struct {
	cl *localcluster.Cluster
	v  cache.Cache
	ns string

	mu sync.Mutex
	// pods are the member Pods seen, by UID.
	pods map[string]*keptLog

	stopped chan struct{}
	done    chan struct{}
}

// keptLog is one Pod's received log.
type keptLog struct {
	member, pod, node, path string
	f                       *os.File
}

// receivedAt is one prompt a member's agent received.
type receivedAt struct {
	text, pod string
	seq       int
	at        time.Time
}

func newLogKeeper(cl *localcluster.Cluster, v cache.Cache, ns string) *logKeeper {
	return &logKeeper{cl: cl, v: v, ns: ns, pods: map[string]*keptLog{}, stopped: make(chan struct{}), done: make(chan struct{})}
}

// start looks for new Pods and logs every 250 ms until stop.
func (k *logKeeper) start(ctx context.Context) {
	go func() {
		defer close(k.done)
		for {
			k.scan(ctx)
			select {
			case <-k.stopped:
				return
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
}

// stop ends the scans after a last one.
func (k *logKeeper) stop() {
	select {
	case <-k.stopped:
	default:
		close(k.stopped)
	}
	<-k.done
	k.scan(context.Background())
}

func (k *logKeeper) close() {
	k.stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, l := range k.pods {
		if l.f != nil {
			l.f.Close()
		}
	}
}

func (k *logKeeper) scan(ctx context.Context) {
	var pods corev1.PodList
	if err := k.v.List(ctx, &pods, client.InNamespace(k.ns)); err != nil {
		return
	}
	for i := range pods.Items {
		k.capture(&pods.Items[i])
	}
}

// capture opens pod's received log if it exists and is not open yet.
func (k *logKeeper) capture(pod *corev1.Pod) {
	member := pod.Labels[fleetv1alpha1.LabelMember]
	if member == "" || pod.Spec.NodeName == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.pods[string(pod.UID)]
	if !ok {
		node, err := k.cl.Node(pod.Spec.NodeName)
		if err != nil {
			return
		}
		l = &keptLog{member: member, pod: pod.Name, node: pod.Spec.NodeName,
			path: filepath.Join(node.Dir, "kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "workspace", filepath.Base(receivedLog))}
		k.pods[string(pod.UID)] = l
	}
	l.open()
}

func (l *keptLog) open() {
	if l.f != nil {
		return
	}
	if f, err := os.Open(l.path); err == nil {
		l.f = f
	}
}

// captureNode opens the logs of every Pod seen on node.
func (k *logKeeper) captureNode(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, l := range k.pods {
		if l.node == node {
			l.open()
		}
	}
}

// podsOf names member's Pods seen, and whether their logs were read.
func (k *logKeeper) podsOf(member string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, l := range k.pods {
		if l.member == member {
			out = append(out, fmt.Sprintf("%s on %s (log open: %v)", l.pod, l.node, l.f != nil))
		}
	}
	slices.Sort(out)
	return out
}

// read returns the prompts each member's agents received, all its Pods
// together in the order received, and the Pods whose logs were never
// opened.
func (k *logKeeper) read() (map[string][]receivedAt, []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string][]receivedAt{}
	var unread []string
	for _, l := range k.pods {
		l.open()
		if l.f == nil {
			unread = append(unread, fmt.Sprintf("%s (member %s, node %s)", l.pod, l.member, l.node))
			continue
		}
		data, err := io.ReadAll(io.NewSectionReader(l.f, 0, 1<<40))
		if err != nil {
			unread = append(unread, fmt.Sprintf("%s (member %s): %v", l.pod, l.member, err))
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e struct {
				Seq  int       `json:"seq"`
				Time time.Time `json:"time"`
				Text string    `json:"text"`
			}
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				unread = append(unread, fmt.Sprintf("%s (member %s): line %q: %v", l.pod, l.member, sc.Text(), err))
				continue
			}
			out[l.member] = append(out[l.member], receivedAt{text: e.Text, pod: l.pod, seq: e.Seq, at: e.Time})
		}
	}
	for _, es := range out {
		slices.SortStableFunc(es, func(a, b receivedAt) int { return a.at.Compare(b.at) })
	}
	slices.Sort(unread)
	return out, unread
}
