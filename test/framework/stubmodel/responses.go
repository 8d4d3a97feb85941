package stubmodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
)

// The OpenAI Responses API as Codex uses it with a model provider of its
// own (wire_api = "responses"): every request carries the whole
// conversation as input items, and the answer streams as server-sent
// events. Codex offers its tools one of two ways, by model:
//   - code mode (its default models): one JavaScript tool, exec, in an
//     additional_tools input item; MCP tools are globals of the script
//     (tools.mcp__fleetd__bridge_reply) and its shell is tools.exec_command;
//   - function mode: top-level tools, fleetd's in a namespace mcp__fleetd,
//     called as function calls with that namespace; the shell is the
//     function exec_command.
// The scripted model answers in the mode the request offers.

// responsesRequest is the part of a Responses API request the model reads.
type responsesRequest struct {
	Model  string          `json:"model"`
	Stream bool            `json:"stream"`
	Input  []inputItem     `json:"input"`
	Tools  []responsesTool `json:"tools"`
	Text   struct {
		Format struct {
			Type   string `json:"type"`
			Schema struct {
				Properties map[string]any `json:"properties"`
			} `json:"schema"`
		} `json:"format"`
	} `json:"text"`
}

// responsesTool is a tool, or a namespace of tools.
type responsesTool struct {
	Type  string          `json:"type"`
	Name  string          `json:"name"`
	Tools []responsesTool `json:"tools"`
}

// inputItem is one item of a request's input: a message, a tool call the
// model made, a call's output, or Codex's additional tools.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	Output    json.RawMessage `json:"output"`
	Tools     []responsesTool `json:"tools"`
}

// fleetdNamespace is the namespace Codex gives fleetd's MCP tools.
const fleetdNamespace = "mcp__fleetd"

// codexShell is Codex's shell tool, as a function and as a script global.
const codexShell = "exec_command"

// responses answers POST /v1/responses.
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		writeResponsesError(w, http.StatusBadRequest, err.Error())
		return
	}
	var req responsesRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		writeResponsesError(w, http.StatusBadRequest, "decoding the request: "+err.Error())
		return
	}
	logged := Request{API: "responses", Method: r.Method, Path: r.URL.Path, Model: req.Model, Stream: req.Stream}
	codeMode := false
	for _, t := range offeredTools(req) {
		logged.Tools = append(logged.Tools, t)
		codeMode = codeMode || t == "exec"
	}
	var item map[string]any
	switch {
	case req.Text.Format.Type == "json_schema" || len(logged.Tools) == 0:
		// The session title Codex asks for on the first prompt.
		logged.Kind, logged.Answer = KindSide, "text"
		item = messageItem(jsonAnswer(req.Text.Format.Type, req.Text.Format.Schema.Properties))
	default:
		prompt, results := responsesTurnOf(req.Input)
		logged.Kind, logged.Prompt, logged.Step = KindTurn, prompt, len(results)
		logged.Images, logged.HookFeedback = responsesTurnImages(req.Input), responsesHookFeedback(req.Input)
		logged.Earlier = earlierPrompts(req.Input, responsesPromptOf)
		next, ok := stepOf(r, prompt, results)
		if !ok {
			return
		}
		if next.tool == "" {
			logged.Answer = "text"
			item = messageItem(next.text)
			break
		}
		logged.Answer = next.tool
		if codeMode {
			item = map[string]any{"type": "custom_tool_call", "id": newID("ctc"), "call_id": newID("call"), "name": "exec",
				"status": "completed", "input": execScript(next)}
		} else {
			item = functionCall(next)
		}
	}
	s.record(logged)
	// The Responses API counts cached input within input_tokens.
	usage := map[string]any{
		"input_tokens": UsageInputTokens + UsageCachedTokens, "input_tokens_details": map[string]int{"cached_tokens": UsageCachedTokens},
		"output_tokens": UsageOutputTokens, "output_tokens_details": map[string]int{"reasoning_tokens": 0},
		"total_tokens": UsageInputTokens + UsageCachedTokens + UsageOutputTokens,
	}
	id := newID("resp")
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response", "status": "completed", "output": []any{item}, "usage": usage})
		return
	}
	stream := eventStream(w)
	send := func(event string, data map[string]any) {
		data["type"] = event
		stream(event, data)
	}
	send("response.created", map[string]any{"response": map[string]any{"id": id, "status": "in_progress"}})
	send("response.output_item.added", map[string]any{"output_index": 0, "item": item})
	send("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	send("response.completed", map[string]any{"response": map[string]any{"id": id, "status": "completed", "usage": usage}})
}

// offeredTools names the tools a request offers: the top-level ones (a
// namespace by its name) and those in Codex's additional_tools items.
func offeredTools(req responsesRequest) []string {
	var names []string
	var walk func([]responsesTool)
	walk = func(ts []responsesTool) {
		for _, t := range ts {
			names = append(names, t.Name)
			walk(t.Tools)
		}
	}
	walk(req.Tools)
	for _, it := range req.Input {
		if it.Type == "additional_tools" {
			walk(it.Tools)
		}
	}
	return names
}

// execScript is the JavaScript of a code-mode call: the step's tool called
// from a script, its result printed as JSON (the structured result, for
// fleetd's tools).
func execScript(next step) string {
	var call string
	switch next.tool {
	case toolReply, toolAsk, toolSend:
		args, _ := json.Marshal(next.input)
		call = fmt.Sprintf("tools.%s__%s(%s)", fleetdNamespace, next.tool, args)
	case toolShell:
		args, _ := json.Marshal(shellArgs(next))
		call = fmt.Sprintf("tools.%s(%s)", codexShell, args)
	}
	return "const r = await " + call + ";\ntext(JSON.stringify(r.structuredContent ?? r));"
}

// functionCall is a function-mode call of the step's tool.
func functionCall(next step) map[string]any {
	item := map[string]any{"type": "function_call", "id": newID("fc"), "call_id": newID("call"), "status": "completed"}
	var args any
	switch next.tool {
	case toolReply, toolAsk, toolSend:
		item["name"], item["namespace"] = next.tool, fleetdNamespace
		args = next.input
	case toolShell:
		item["name"] = codexShell
		args = shellArgs(next)
	}
	b, _ := json.Marshal(args)
	item["arguments"] = string(b)
	return item
}

// shellArgs runs the step's command outside Codex's sandbox, which takes an
// approval (or is refused, when Codex never asks).
func shellArgs(next step) map[string]any {
	return map[string]any{"cmd": next.input["command"], "sandbox_permissions": "require_escalated", "justification": next.input["description"]}
}

func messageItem(text string) map[string]any {
	return map[string]any{"type": "message", "role": "assistant", "id": newID("msg"), "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
}

// jsonAnswer is the JSON a structured output asks for, else a word.
func jsonAnswer(formatType string, properties map[string]any) string {
	if formatType != "json_schema" {
		return "OK."
	}
	obj := map[string]string{}
	for k := range properties {
		obj[k] = "Scripted session"
	}
	b, _ := json.Marshal(obj)
	return string(b)
}

// contextBlock matches the context Codex sends as user messages (the
// environment, an interrupted turn, a Stop hook's reason): a whole message
// in one tag.
var contextBlock = regexp.MustCompile(`(?s)^\s*<([a-z_]+)(\s[^>]*)?>.*</([a-z_]+)>\s*$`)

// responsesTurnOf finds the turn a request continues: the prompt (the latest
// user message that is not context Codex added) and the results of the
// calls the model made since, in order.
func responsesTurnOf(items []inputItem) (prompt string, results []string) {
	start := -1
	for i := len(items) - 1; i >= 0; i-- {
		if p := responsesPromptOf(items[i]); p != "" {
			start, prompt = i, p
			break
		}
	}
	if start < 0 {
		return "", nil
	}
	byID := map[string]string{}
	var order []string
	for _, it := range items[start+1:] {
		switch it.Type {
		case "custom_tool_call", "function_call":
			order = append(order, it.CallID)
		case "custom_tool_call_output", "function_call_output":
			byID[it.CallID] = outputText(it.Output)
		}
	}
	for _, id := range order {
		if r, ok := byID[id]; ok {
			results = append(results, r)
		}
	}
	return prompt, results
}

// responsesPromptOf is the prompt an input item holds: a user message's
// text that is not context Codex added; "" for none.
func responsesPromptOf(it inputItem) string {
	if it.Type != "message" || it.Role != "user" {
		return ""
	}
	var texts []string
	for _, t := range itemTexts(it.Content) {
		if !contextBlock.MatchString(t) && !imageWrapper.MatchString(t) {
			texts = append(texts, t)
		}
	}
	return strings.Join(texts, "\n")
}

// itemTexts is the text of a message's content: a string, or its parts.
func itemTexts(raw json.RawMessage) []string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var out []string
	for _, p := range parts {
		if p.Text != "" {
			out = append(out, p.Text)
		}
	}
	return out
}

// outputText is what a call returned: a string, or its text parts without
// Codex's header ("Script completed ... Output:", "Wall time ...").
func outputText(raw json.RawMessage) string {
	parts := itemTexts(raw)
	if len(parts) > 1 && (strings.HasPrefix(parts[0], "Script ") || strings.HasPrefix(parts[0], "Wall time")) {
		parts = parts[1:]
	}
	return strings.Join(parts, "\n")
}

func writeResponsesError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": msg}})
}
