package gateway

import (
	"strings"
	"testing"

	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// TestProcessTools: the process namespace is off by default; when on, a
// caller runs, watches, reads and kills its own processes only.
func TestProcessTools(t *testing.T) {
	ns := env.Namespace(t)
	off := startGateway(t, ns, Options{})
	wantCode(t, callTool[ProcessOutput](t, off.connect(t, staticToken, nil), "process_run", map[string]any{"command": []string{"true"}}), toolerr.FeatureDisabled)

	h := startGateway(t, ns, Options{Features: map[ToolNamespace]bool{ToolNamespaceProcess: true, ToolNamespaceTeam: false}})
	_, memberToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	other := h.connect(t, memberToken, nil)
	wantCode(t, callTool[TeamStatusOutput](t, primary, "team_status", map[string]any{"team": "x"}), toolerr.FeatureDisabled)

	run := wantOK(t, callTool[ProcessOutput](t, primary, "process_run", map[string]any{"command": []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}))
	id := run.Process.ProcessID
	testutil.Eventually(t, "", func() error {
		st := wantOK(t, callTool[ProcessStatusOutput](t, primary, "process_status", map[string]any{"processId": id}))
		p := st.Processes[0]
		return errIf(p.State != "exited" || p.ExitCode == nil || *p.ExitCode != 3, "process = %+v", p)
	})
	logs := wantOK(t, callTool[ProcessLogsOutput](t, primary, "process_logs", map[string]any{"processId": id}))
	if !strings.Contains(logs.Output, "out\n") || !strings.Contains(logs.Output, "err\n") || logs.Truncated {
		t.Errorf("logs = %+v", logs)
	}
	if tail := wantOK(t, callTool[ProcessLogsOutput](t, primary, "process_logs", map[string]any{"processId": id, "tailBytes": 2})); len(tail.Output) != 2 || !tail.Truncated {
		t.Errorf("tail of 2 bytes = %+v", tail)
	}
	wantCode(t, callTool[ProcessLogsOutput](t, other, "process_logs", map[string]any{"processId": id}), toolerr.Forbidden)
	wantCode(t, callTool[ProcessLogsOutput](t, other, "process_logs", map[string]any{"processId": "no-such-process"}), toolerr.NotFound)
	if st := wantOK(t, callTool[ProcessStatusOutput](t, other, "process_status", nil)); len(st.Processes) != 0 {
		t.Errorf("another caller sees %+v", st.Processes)
	}

	sleeper := wantOK(t, callTool[ProcessOutput](t, primary, "process_run", map[string]any{"command": []string{"sleep", "60"}}))
	killed := wantOK(t, callTool[ProcessOutput](t, primary, "process_kill", map[string]any{"processId": sleeper.Process.ProcessID}))
	if killed.Process.State != "exited" {
		t.Errorf("after process_kill: %+v", killed.Process)
	}
	wantCode(t, callTool[ProcessOutput](t, primary, "process_run", map[string]any{"command": []string{"/no/such/program"}}), toolerr.InvalidArgument)
	wantCode(t, callTool[ProcessOutput](t, primary, "process_run", map[string]any{"command": []string{}}), toolerr.InvalidArgument)
}
