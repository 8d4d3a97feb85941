package stubmodel

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
)

// What a turn's prompt came with, besides its text: the images the agent
// attached (Claude Code: image content blocks; Codex: input_image parts
// with a data URL), and what the agent's hooks added to the conversation
// (Claude Code: "Stop hook feedback" in a reminder; Codex: a hook_prompt).

// imageSource is an Anthropic image block's source.
type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// imageOf decodes an image's base64 bytes; ok is false for anything else.
func imageOf(mediaType, data string) (Image, bool) {
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil || mediaType == "" {
		return Image{}, false
	}
	sum := sha256.Sum256(b)
	return Image{MediaType: mediaType, SHA256: hex.EncodeToString(sum[:]), Size: len(b)}, true
}

// claudeFeedback is how Claude Code hands a hook's words to the model.
const claudeFeedback = "Stop hook feedback:"

// turnImages are the images in the messages after a Claude Code
// conversation's last assistant message: the prompt and what came with it
// (a pasted image, or an @-mentioned file Claude Code read).
func turnImages(msgs []message) []Image {
	var out []Image
	for i := lastTurnStart(msgs, func(m message) bool { return m.Role != "assistant" }); i < len(msgs); i++ {
		for _, b := range msgs[i].Content {
			if b.Type == "image" && b.Source != nil && b.Source.Type == "base64" {
				if img, ok := imageOf(b.Source.MediaType, b.Source.Data); ok {
					out = append(out, img)
				}
			}
		}
	}
	return out
}

// lastTurnStart is the index of the run of messages at the end of msgs
// that are not the model's: the first after its last answer.
func lastTurnStart[T any](msgs []T, notModel func(T) bool) int {
	i := len(msgs)
	for i > 0 && notModel(msgs[i-1]) {
		i--
	}
	return i
}

// hookFeedback is every hook's feedback in a Claude Code conversation.
func hookFeedback(msgs []message) []string {
	var out []string
	for _, m := range msgs {
		if m.Role != "user" {
			continue
		}
		for _, b := range m.Content {
			if _, after, ok := strings.Cut(b.Text, claudeFeedback); b.Type == "text" && ok {
				out = append(out, strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(after), "</system-reminder>")))
			}
		}
	}
	return out
}

// imageWrapper matches the text parts Codex puts around an attached image.
var imageWrapper = regexp.MustCompile(`^\s*(<image\b[^>]*>|</image>)\s*$`)

// hookPrompt matches Codex's text of a hook that kept a turn going.
var hookPrompt = regexp.MustCompile(`(?s)^\s*<hook_prompt\b[^>]*>(.*)</hook_prompt>\s*$`)

// responsesTurnImages are the images of the messages at the end of a
// Codex request, after the model's last item: the prompt's attachments.
func responsesTurnImages(items []inputItem) []Image {
	var out []Image
	notModel := func(it inputItem) bool { return it.Type == "message" && it.Role != "assistant" }
	for i := lastTurnStart(items, notModel); i < len(items); i++ {
		var parts []struct {
			Type     string `json:"type"`
			ImageURL string `json:"image_url"`
		}
		_ = json.Unmarshal(items[i].Content, &parts)
		for _, p := range parts {
			meta, data, ok := strings.Cut(strings.TrimPrefix(p.ImageURL, "data:"), ";base64,")
			if p.Type != "input_image" || !ok {
				continue
			}
			if img, ok := imageOf(meta, data); ok {
				out = append(out, img)
			}
		}
	}
	return out
}

// responsesHookFeedback is every hook's prompt in a Codex conversation.
func responsesHookFeedback(items []inputItem) []string {
	var out []string
	for _, it := range items {
		if it.Type != "message" || it.Role != "user" {
			continue
		}
		for _, t := range itemTexts(it.Content) {
			if m := hookPrompt.FindStringSubmatch(t); m != nil {
				out = append(out, strings.TrimSpace(m[1]))
			}
		}
	}
	return out
}
