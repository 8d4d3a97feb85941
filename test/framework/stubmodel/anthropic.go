package stubmodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
)

// messagesRequest is the part of a Messages API request the model reads.
type messagesRequest struct {
	Model         string          `json:"model"`
	Stream        bool            `json:"stream"`
	Messages      []message       `json:"messages"`
	Tools         []tool          `json:"tools"`
	StopSequences []string        `json:"stop_sequences"`
	OutputConfig  json.RawMessage `json:"output_config"`
}

type tool struct {
	Name string `json:"name"`
}

type message struct {
	Role    string  `json:"role"`
	Content content `json:"content"`
}

// content is a message's content: a string, or blocks.
type content []block

func (c *content) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*c = content{{Type: "text", Text: s}}
		return nil
	}
	var blocks []block
	if err := json.Unmarshal(b, &blocks); err != nil {
		return err
	}
	*c = blocks
	return nil
}

type block struct {
	Type      string          `json:"type"`
	Source    *imageSource    `json:"source,omitempty"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
}

// toolSearch is Claude Code's tool that loads deferred tools' schemas.
const toolSearch = "ToolSearch"

var ids atomic.Uint64

func newID(prefix string) string { return fmt.Sprintf("%s_%012d", prefix, ids.Add(1)) }

// messages answers POST /v1/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	var req messagesRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		writeAnthropicError(w, http.StatusBadRequest, "decoding the request: "+err.Error())
		return
	}
	logged := Request{API: "anthropic", Method: r.Method, Path: r.URL.Path, Model: req.Model, Stream: req.Stream}
	for _, t := range req.Tools {
		logged.Tools = append(logged.Tools, t.Name)
	}
	var blocks []block
	stop := "end_turn"
	switch {
	case slices.Contains(req.StopSequences, "</block>"):
		// Claude Code's auto-mode classifier: "no" lets the tool run.
		logged.Kind, logged.Answer = KindClassifier, "allow"
		blocks = []block{{Type: "text", Text: "<block>no"}}
		stop = "stop_sequence"
	case len(req.Tools) == 0:
		logged.Kind, logged.Answer = KindSide, "text"
		blocks = []block{{Type: "text", Text: sideAnswer(req.OutputConfig)}}
	default:
		prompt, results := turnOf(req.Messages)
		logged.Kind, logged.Prompt, logged.Step = KindTurn, prompt, len(results)
		logged.Images, logged.HookFeedback = turnImages(req.Messages), hookFeedback(req.Messages)
		logged.Earlier = earlierPrompts(req.Messages, promptOf)
		next, ok := stepOf(r, prompt, results)
		if !ok {
			return
		}
		if next.tool == "" {
			logged.Answer = "text"
			blocks = []block{{Type: "text", Text: next.text}}
			break
		}
		name := claudeTool(next.tool)
		if name == "" {
			logged.Answer = "text"
			blocks = []block{{Type: "text", Text: "I have no " + next.tool + " tool."}}
			break
		}
		offered := func(n string) bool { return slices.ContainsFunc(req.Tools, func(t tool) bool { return t.Name == n }) }
		if !offered(name) && !offered(toolSearch) {
			// Neither the tool nor ToolSearch is offered (the agent's MCP
			// server is not connected): a model cannot call it, and
			// asking for ToolSearch again would loop for as long as the
			// turn is held.
			logged.Answer = "text"
			blocks = []block{{Type: "text", Text: "I have no " + next.tool + " tool."}}
			break
		}
		if !offered(name) {
			// Deferred behind ToolSearch: load it first, as the model must.
			name = toolSearch
			next.input = map[string]any{"query": "select:" + strings.Join(slices.Compact([]string{claudeTool(next.tool), claudeTool(toolReply), claudeTool(toolAsk)}), ",")}
		}
		input, _ := json.Marshal(next.input)
		logged.Answer = name
		blocks = []block{{Type: "text", Text: next.text}, {Type: "tool_use", ID: newID("toolu"), Name: name, Input: input}}
		stop = "tool_use"
	}
	s.record(logged)
	usage := map[string]int{
		"input_tokens": UsageInputTokens, "cache_read_input_tokens": UsageCachedTokens,
		"cache_creation_input_tokens": UsageCacheCreationTokens, "output_tokens": UsageOutputTokens,
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{
			"id": newID("msg"), "type": "message", "role": "assistant", "model": req.Model,
			"content": blocks, "stop_reason": stop, "stop_sequence": stopSequence(stop), "usage": usage,
		})
		return
	}
	streamMessage(w, req.Model, blocks, stop, usage)
}

func stopSequence(stop string) any {
	if stop == "stop_sequence" {
		return "</block>"
	}
	return nil
}

// claudeTool is Claude Code's name for one of the scripted model's tools:
// fleetd's MCP tools as Claude Code names them, and its shell tool.
func claudeTool(t string) string {
	switch t {
	case toolReply, toolAsk, toolSend:
		return "mcp__fleetd__" + t
	case toolShell:
		return "Bash"
	}
	return ""
}

// turnOf finds the turn a request continues: the prompt (the latest user
// message that is not a tool result, without Claude Code's reminders), the
// results of the scripted tool calls the assistant made since, in order.
// ToolSearch calls are plumbing, not steps of the script.
func turnOf(msgs []message) (prompt string, results []string) {
	start := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if p := promptOf(msgs[i]); p != "" {
			start, prompt = i, p
			break
		}
	}
	if start < 0 {
		return "", nil
	}
	byID := map[string]string{}
	var order []string
	for _, m := range msgs[start+1:] {
		for _, b := range m.Content {
			switch {
			case m.Role == "assistant" && b.Type == "tool_use" && b.Name != toolSearch:
				order = append(order, b.ID)
			case m.Role == "user" && b.Type == "tool_result":
				byID[b.ToolUseID] = resultText(b.Content)
			}
		}
	}
	for _, id := range order {
		if r, ok := byID[id]; ok {
			results = append(results, r)
		}
	}
	return prompt, results
}

// promptOf is the prompt a message holds: a user message's text, without
// Claude Code's reminders; "" for none. A prompt typed after an
// interrupted tool call arrives in the same message as that call's result;
// "Tool loaded." follows a ToolSearch result and is no prompt.
func promptOf(m message) string {
	if m.Role != "user" {
		return ""
	}
	var texts []string
	for _, b := range m.Content {
		if t := strings.TrimSpace(b.Text); b.Type == "text" && !strings.HasPrefix(t, "<system-reminder>") && t != "Tool loaded." {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// earlierPrompts are the prompts of the turns before the last in items,
// as promptOf reads each: a Messages or a Responses request's.
func earlierPrompts[T any](items []T, promptOf func(T) string) []string {
	var prompts []string
	for _, it := range items {
		if p := promptOf(it); p != "" {
			prompts = append(prompts, p)
		}
	}
	if len(prompts) == 0 {
		return nil
	}
	return prompts[:len(prompts)-1]
}

// resultText is a tool result's text: a string, or its text blocks.
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []block
	_ = json.Unmarshal(raw, &blocks)
	var texts []string
	for _, b := range blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// sideAnswer answers a request without tools: the JSON a structured output
// asks for (Claude Code's session title), else a word.
func sideAnswer(outputConfig json.RawMessage) string {
	var oc struct {
		Format struct {
			Type   string `json:"type"`
			Schema struct {
				Properties map[string]any `json:"properties"`
			} `json:"schema"`
		} `json:"format"`
	}
	_ = json.Unmarshal(outputConfig, &oc)
	return jsonAnswer(oc.Format.Type, oc.Format.Schema.Properties)
}

// streamMessage writes a message as the Messages API's server-sent events.
func streamMessage(w http.ResponseWriter, model string, blocks []block, stop string, usage map[string]int) {
	send := eventStream(w)
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": newID("msg"), "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]int{
			"input_tokens": usage["input_tokens"], "cache_read_input_tokens": usage["cache_read_input_tokens"],
			"cache_creation_input_tokens": usage["cache_creation_input_tokens"], "output_tokens": 1,
		},
	}})
	for i, b := range blocks {
		switch b.Type {
		case "text":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": b.Text}})
		case "tool_use":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(b.Input)}})
		}
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": stopSequence(stop)}, "usage": map[string]int{"output_tokens": usage["output_tokens"]}})
	send("message_stop", map[string]any{"type": "message_stop"})
}

// countTokens answers POST /v1/messages/count_tokens.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
	s.record(Request{API: "anthropic", Method: r.Method, Path: r.URL.Path, Kind: KindCountTokens})
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": len(raw)/4 + 1})
}

func writeAnthropicError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]string{"type": "invalid_request_error", "message": msg}})
}
