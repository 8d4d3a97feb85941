package localcluster

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// recoveringCRI answers Version as containerd's CRI plugin does while it
// recovers its containers' state, until ready.
type recoveringCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	ready atomic.Bool
	asked atomic.Int32
	// hangs, when set, makes every call after the first answers hang
	// until its caller gives up, as a CRI stuck in its recovery does.
	hangs   bool
	answers int32
}

func (c *recoveringCRI) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	n := c.asked.Add(1)
	if c.hangs && n > c.answers {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if !c.ready.Load() {
		return nil, status.Error(codes.Unknown, "server is not initialized yet")
	}
	return &runtimeapi.VersionResponse{RuntimeName: "containerd"}, nil
}

func serveCRI(t *testing.T, cri *recoveringCRI) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "containerd.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, cri)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return socket
}

// TestWaitCRIWaitsForTheRecovery: a socket that takes connections is not
// enough; the kubelet needs the CRI to answer, and exits if it does not.
func TestWaitCRIWaitsForTheRecovery(t *testing.T) {
	cri := &recoveringCRI{}
	socket := serveCRI(t, cri)
	done := make(chan error, 1)
	go func() { done <- waitCRI(context.Background(), socket, time.Minute) }()
	for cri.asked.Load() < 3 {
		select {
		case err := <-done:
			t.Fatalf("waitCRI returned %v while the CRI was not initialized", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cri.ready.Store(true)
	if err := <-done; err != nil {
		t.Fatalf("waitCRI after the recovery: %v", err)
	}
}

// TestWaitCRISaysWhy: a CRI that never gets ready is reported with its
// last answer.
func TestWaitCRISaysWhy(t *testing.T) {
	socket := serveCRI(t, &recoveringCRI{})
	err := waitCRI(context.Background(), socket, 3*time.Second)
	if err == nil || !strings.Contains(err.Error(), "not initialized yet") {
		t.Fatalf("waitCRI = %v, want the CRI's own answer", err)
	}
}

// TestWaitCRIKeepsTheAnswerPastASilence: a call that runs out of time is
// no answer; the report keeps what the CRI last said. (The wait's own end
// cut a call short and hid the answer once in CI.)
func TestWaitCRIKeepsTheAnswerPastASilence(t *testing.T) {
	socket := serveCRI(t, &recoveringCRI{hangs: true, answers: 1})
	err := waitCRI(context.Background(), socket, 3*time.Second)
	if err == nil || !strings.Contains(err.Error(), "not initialized yet") {
		t.Fatalf("waitCRI = %v, want the CRI's own answer", err)
	}
}

// TestWaitCRISaysItIsSilent: a CRI that never answers is reported so.
func TestWaitCRISaysItIsSilent(t *testing.T) {
	socket := serveCRI(t, &recoveringCRI{hangs: true})
	err := waitCRI(context.Background(), socket, 3*time.Second)
	if err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("waitCRI = %v, want it said the CRI does not answer", err)
	}
}
