package stubmodel

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestScript(t *testing.T) {
	cases := map[string]struct {
		prompt  string
		want    []Action
		wantErr bool
	}{
		"no directive echoes": {prompt: "hello there", want: []Action{{Kind: ActReply, Arg: "echo: hello there"}}},
		"ask then reply":      {prompt: "ask: Which?\nreply: on {answer}", want: []Action{{Kind: ActAsk, Arg: "Which?"}, {Kind: ActReply, Arg: "on {answer}"}}},
		"sleep":               {prompt: "Sleep: 0.5\nsilent: done", want: []Action{{Kind: ActSleep, Arg: "0.5", Delay: 500 * time.Millisecond}, {Kind: ActSilent, Arg: "done"}}},
		"bad sleep":           {prompt: "sleep: soon", wantErr: true},
		"empty reply":         {prompt: "reply:", wantErr: true},
		"send":                {prompt: "send: w1: reply: hi", want: []Action{{Kind: ActSend, Arg: "w1: reply: hi"}}},
		"send to nobody":      {prompt: "send: reply only", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Script(tc.prompt)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Script() error = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Script() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextStep(t *testing.T) {
	script, _ := Script("ask: Which branch?\nsleep: 1\nreply: working on {answer}")
	cases := map[string]struct {
		results []string
		want    step
	}{
		"first asks": {want: step{tool: toolAsk, input: map[string]any{"content": "Which branch?"}, text: "Asking."}},
		"then replies with the answer after the pause": {
			results: []string{`{"answer":"main","turnId":"d.q1"}`},
			want:    step{delay: time.Second, tool: toolReply, input: map[string]any{"content": "working on main"}, text: "Replying."},
		},
		"then ends": {results: []string{`{"answer":"main"}`, `{"dispatchId":"d"}`}, want: step{text: "Done."}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, nextStep(script, tc.results), cmp.AllowUnexported(step{})); diff != "" {
				t.Errorf("nextStep() (-want +got):\n%s", diff)
			}
		})
	}
	send, _ := Script("send: w1: reply: hi\nsilent: sent")
	if got := nextStep(send, nil); got.tool != toolSend || got.input["sessionId"] != "w1" || got.input["content"] != "reply: hi" || got.input["wait"] != false {
		t.Errorf("send dispatches to its member, got %+v", got)
	}
	if got := nextStep(send, []string{`{"outcome":"dispatched"}`}); got.tool != "" || got.text != "sent" {
		t.Errorf("after the send the turn ends as told, got %+v", got)
	}
	lone, _ := Script("ask: Colour?")
	if got := nextStep(lone, []string{`{"answer":"blue"}`}); got.tool != toolReply || got.input["content"] != "blue" {
		t.Errorf("a lone question replies with its answer, got %+v", got)
	}
}

// TestTurnOf reads turns the way Claude Code sends them: reminders beside
// the prompt, ToolSearch plumbing, and a prompt typed after an interrupted
// call arriving with that call's result.
func TestTurnOf(t *testing.T) {
	var msgs []message
	raw := `[
	 {"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},{"type":"text","text":"bash: curl x"}]},
	 {"role":"assistant","content":[{"type":"tool_use","id":"a","name":"Bash","input":{}}]},
	 {"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"Interrupted"},{"type":"text","text":"reply: next"}]},
	 {"role":"assistant","content":[{"type":"tool_use","id":"b","name":"ToolSearch","input":{}}]},
	 {"role":"user","content":[{"type":"tool_result","tool_use_id":"b","content":[{"type":"tool_reference","tool_name":"mcp__fleetd__bridge_reply"}]},{"type":"text","text":"Tool loaded."}]},
	 {"role":"assistant","content":[{"type":"tool_use","id":"c","name":"mcp__fleetd__bridge_reply","input":{}}]},
	 {"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":[{"type":"text","text":"{\"dispatchId\":\"d\"}"}]}]}
	]`
	if err := json.Unmarshal([]byte(raw), &msgs); err != nil {
		t.Fatal(err)
	}
	prompt, results := turnOf(msgs)
	if prompt != "reply: next" || len(results) != 1 || results[0] != `{"dispatchId":"d"}` {
		t.Errorf("turnOf() = %q, %q; want the second prompt and its one reply's result", prompt, results)
	}
}

// TestMessagesStream asks the server as Claude Code does, streaming, and
// reads the tool call back from the events.
func TestMessagesStream(t *testing.T) {
	s, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	body := `{"model":"m","stream":true,"tools":[{"name":"mcp__fleetd__bridge_reply"}],"messages":[{"role":"user","content":"reply: hi"}]}`
	resp, err := http.Post(srv.URL+"/v1/messages?beta=true", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	var input string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, e)
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, "input_json_delta") {
			var ev struct {
				Delta struct {
					PartialJSON string `json:"partial_json"`
				} `json:"delta"`
			}
			_ = json.Unmarshal([]byte(d), &ev)
			input = ev.Delta.PartialJSON
		}
	}
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if diff := cmp.Diff(want, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if input != `{"content":"hi"}` {
		t.Errorf("tool input %q", input)
	}
	if got := s.Turns(); got["reply: hi"] != 1 {
		t.Errorf("Turns() = %v", got)
	}
}

// TestResponsesTurnOf reads turns the way Codex sends them: the environment
// as a user message of its own, an earlier turn before, and code-mode
// results with Codex's script header.
func TestResponsesTurnOf(t *testing.T) {
	var items []inputItem
	raw := `[
	 {"type":"additional_tools","role":"developer","tools":[{"type":"namespace","name":"functions","tools":[{"type":"custom","name":"exec"}]}]},
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"}]},
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"silent: earlier"}]},
	 {"type":"message","role":"assistant","content":[{"type":"output_text","text":"earlier"}]},
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"ask: Which?\nreply: on {answer}"}]},
	 {"type":"custom_tool_call","call_id":"c1","name":"exec","input":"..."},
	 {"type":"custom_tool_call_output","call_id":"c1","output":[{"type":"input_text","text":"Script completed\nWall time 0.1 seconds\nOutput:\n"},{"type":"input_text","text":"{\"answer\":\"main\",\"turnId\":\"d.q1\"}"}]}
	]`
	if err := json.Unmarshal([]byte(raw), &items); err != nil {
		t.Fatal(err)
	}
	prompt, results := responsesTurnOf(items)
	if prompt != "ask: Which?\nreply: on {answer}" || len(results) != 1 || answerOf(results[0]) != "main" {
		t.Errorf("responsesTurnOf() = %q, %q; want the second prompt and its question's answer", prompt, results)
	}
}

// TestResponsesStream asks the server as Codex does, in both of its tool
// modes and for a session title, and reads the answer back from the events.
func TestResponsesStream(t *testing.T) {
	s, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	prompt := `{"type":"message","role":"user","content":[{"type":"input_text","text":"reply: hi"}]}`
	cases := map[string]struct {
		body string
		want map[string]any
	}{
		"code mode calls fleetd from a script": {
			body: `{"model":"m","stream":true,"input":[{"type":"additional_tools","tools":[{"type":"namespace","name":"functions","tools":[{"type":"custom","name":"exec"}]}]},` + prompt + `]}`,
			want: map[string]any{"type": "custom_tool_call", "name": "exec",
				"input": "const r = await tools.mcp__fleetd__bridge_reply({\"content\":\"hi\"});\ntext(JSON.stringify(r.structuredContent ?? r));"},
		},
		"function mode calls fleetd's namespace": {
			body: `{"model":"m","stream":true,"tools":[{"type":"function","name":"exec_command"},{"type":"namespace","name":"mcp__fleetd","tools":[{"type":"function","name":"bridge_reply"}]}],"input":[` + prompt + `]}`,
			want: map[string]any{"type": "function_call", "name": "bridge_reply", "namespace": "mcp__fleetd", "arguments": `{"content":"hi"}`},
		},
		"a title is the JSON asked for": {
			body: `{"model":"m","stream":true,"text":{"format":{"type":"json_schema","schema":{"properties":{"title":{}}}}},"input":[{"type":"additional_tools","tools":[{"type":"custom","name":"exec"}]},` + prompt + `]}`,
			want: map[string]any{"type": "message", "text": `{"title":"Scripted session"}`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var events []string
			var item map[string]any
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if e, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
					events = append(events, e)
				}
				if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(d, `"response.output_item.done"`) {
					var ev struct{ Item map[string]any }
					_ = json.Unmarshal([]byte(d), &ev)
					item = ev.Item
				}
			}
			want := []string{"response.created", "response.output_item.added", "response.output_item.done", "response.completed"}
			if diff := cmp.Diff(want, events); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			got := map[string]any{}
			for k := range tc.want {
				got[k] = item[k]
			}
			if _, ok := tc.want["text"]; ok {
				if content, _ := item["content"].([]any); len(content) == 1 {
					got["text"] = content[0].(map[string]any)["text"]
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("item (-want +got):\n%s", diff)
			}
		})
	}
	if got := s.Turns(); got["reply: hi"] != 2 {
		t.Errorf("Turns() = %v, want the two turns (the title is no turn)", got)
	}
}

// TestTurnAttachments reads a turn's images and hooks' feedback as Claude
// Code and Codex send them (shapes captured from the pinned CLIs): an
// @-mentioned image Claude Code read, a Stop hook's reason in a reminder,
// an image Codex attached with its wrapper texts, and Codex's hook_prompt.
func TestTurnAttachments(t *testing.T) {
	// An 8x8 red PNG.
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAAEklEQVR4nGP4z8CAFWEXHbQSACj/P8Fu7N9hAAAAAElFTkSuQmCC"
	const sum = "57cda64cead0869cd5f90dfebb024f4bd9a922aaea91d513de6fa3e949d88921"
	var msgs []message
	raw := `[
	 {"role":"user","content":"<system-reminder>\nCalled the Read tool with the following input: {\"file_path\":\"/a/red.png\"}\n</system-reminder>"},
	 {"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}},{"type":"text","text":"@/a/red.png\nreply: seen"}]},
	 {"role":"system","content":[{"type":"text","text":"# Environment"}]}
	]`
	if err := json.Unmarshal([]byte(raw), &msgs); err != nil {
		t.Fatal(err)
	}
	imgs := turnImages(msgs)
	if len(imgs) != 1 || imgs[0].MediaType != "image/png" || imgs[0].Size != 75 || imgs[0].SHA256 != sum {
		t.Errorf("turnImages() = %+v, want the one PNG", imgs)
	}
	if prompt, _ := turnOf(msgs); prompt != "@/a/red.png\nreply: seen" {
		t.Errorf("turnOf() = %q", prompt)
	}
	msgs = append(msgs, message{Role: "assistant", Content: content{{Type: "text", Text: "seen"}}},
		message{Role: "user", Content: content{{Type: "text", Text: "<system-reminder>\nThe text below is the output of a hook.\nStop hook feedback:\nw1 replied: done\n</system-reminder>"}}})
	if got := turnImages(msgs); len(got) != 0 {
		t.Errorf("turnImages() after the answer = %+v, want none: they came with the earlier prompt", got)
	}
	if got := hookFeedback(msgs); len(got) != 1 || got[0] != "w1 replied: done" {
		t.Errorf("hookFeedback() = %q", got)
	}

	var items []inputItem
	raw = `[
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"}]},
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"<image name=[Image #1] path=\"/a/red.png\">"},{"type":"input_image","image_url":"data:image/png;base64,` + png + `"},{"type":"input_text","text":"</image>"},{"type":"input_text","text":"[Image #1] \nreply: seen"}]},
	 {"type":"message","role":"assistant","content":[{"type":"output_text","text":"seen"}]},
	 {"type":"message","role":"user","content":[{"type":"input_text","text":"<hook_prompt hook_run_id=\"stop:0:/c/config.toml\">w1 replied: done</hook_prompt>"}]}
	]`
	if err := json.Unmarshal([]byte(raw), &items); err != nil {
		t.Fatal(err)
	}
	if prompt, _ := responsesTurnOf(items); prompt != "[Image #1] \nreply: seen" {
		t.Errorf("responsesTurnOf() = %q, want the prompt without the image's wrapper or the hook's prompt", prompt)
	}
	if got := responsesHookFeedback(items); len(got) != 1 || got[0] != "w1 replied: done" {
		t.Errorf("responsesHookFeedback() = %q", got)
	}
	if got := responsesTurnImages(items[:2]); len(got) != 1 || got[0].Size != 75 || got[0].SHA256 != sum {
		t.Errorf("responsesTurnImages() = %+v, want the one PNG", got)
	}
}

// TestUsageIsKnown: both APIs report the same known usage for every call,
// whatever the request, in each API's own shape, so tests can assert the
// exact sums the agents record.
func TestUsageIsKnown(t *testing.T) {
	s, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	post := func(path, body string, into any) {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
	for _, prompt := range []string{"reply: hi", "reply: " + strings.Repeat("a much longer prompt ", 100)} {
		var m struct {
			Usage map[string]int `json:"usage"`
		}
		post("/v1/messages", `{"model":"m","messages":[{"role":"user","content":"`+prompt+`"}]}`, &m)
		want := map[string]int{"input_tokens": UsageInputTokens, "cache_read_input_tokens": UsageCachedTokens, "cache_creation_input_tokens": UsageCacheCreationTokens, "output_tokens": UsageOutputTokens}
		if diff := cmp.Diff(want, m.Usage); diff != "" {
			t.Errorf("Messages usage (-want +got):\n%s", diff)
		}
		var r struct {
			Usage struct {
				InputTokens  int `json:"input_tokens"`
				InputDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"input_tokens_details"`
				OutputTokens int `json:"output_tokens"`
				TotalTokens  int `json:"total_tokens"`
			} `json:"usage"`
		}
		post("/v1/responses", `{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"`+prompt+`"}]}]}`, &r)
		if u := r.Usage; u.InputTokens != UsageInputTokens+UsageCachedTokens || u.InputDetails.CachedTokens != UsageCachedTokens || u.OutputTokens != UsageOutputTokens || u.TotalTokens != UsageInputTokens+UsageCachedTokens+UsageOutputTokens {
			t.Errorf("Responses usage = %+v", u)
		}
	}
}

// TestMessagesOnlyCallsOfferedTools: the stand-in calls a tool the
// request offers, or ToolSearch where the tool is deferred behind it; with
// neither (an agent whose MCP server did not connect) it answers in text,
// as a model must, rather than ask for ToolSearch on every call of a turn.
// (A request with no tools at all is a side request, answered in text.)
func TestMessagesOnlyCallsOfferedTools(t *testing.T) {
	s, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	reply := claudeTool(toolReply)
	for tools, want := range map[string]string{
		`[{"name":"Bash"}]`:                                "text",
		`[{"name":"ToolSearch"}]`:                          toolSearch,
		`[{"name":"` + reply + `"}]`:                       reply,
		`[{"name":"ToolSearch"},{"name":"` + reply + `"}]`: reply,
	} {
		resp, err := http.Post(srv.URL+"/v1/messages", "application/json",
			strings.NewReader(`{"model":"m","tools":`+tools+`,"messages":[{"role":"user","content":[{"type":"text","text":"reply: hi"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Content []struct{ Type, Name string } `json:"content"`
		}
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got := "text"
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				got = b.Name
			}
		}
		if got != want {
			t.Errorf("tools %s: the answer calls %q, want %q", tools, got, want)
		}
	}
}
