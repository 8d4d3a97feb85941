package agents

import (
	"path/filepath"
	"strings"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// How the pinned CLIs take an image in an interactive session, as seen by
// driving them through a terminal:
//   - Claude Code reads a file @-mentioned in the prompt when the prompt is
//     submitted, and an image file becomes an image block of the turn's
//     request. The mentions go on a line of their own before the message,
//     after a word, so the one paste and Enter of herdr's agent.prompt
//     deliver both: a mention under the cursor at the end of the text
//     would open the file picker, which takes the Enter, and a pasted line
//     that is nothing but a path is looked at as an image to attach, which
//     takes long enough on a busy machine for the Enter to come first.
//   - Codex attaches an image when a paste is nothing but the image's path
//     (it shows [Image #1]); a path inside other pasted text stays text.
//     So each path is a paste of its own, and the message follows, its
//     own paste and Enter.

// TakesImages reports whether fleetd can hand an agent kind images.
func TakesImages(kind fleetv1alpha1.AgentKind) bool {
	return kind == fleetv1alpha1.AgentClaude || kind == fleetv1alpha1.AgentCodex
}

// ImagePrompt is how to type a message with images into an agent: Pastes
// first, each a paste of its own without Enter, then Prompt, submitted.
type ImagePrompt struct {
	Pastes []string
	Prompt string
}

// PromptWithImages is how to type content with the image files at paths
// (absolute, where the agent runs) into an agent of kind, which must take
// images.
func PromptWithImages(kind fleetv1alpha1.AgentKind, paths []string, content string) ImagePrompt {
	if kind == fleetv1alpha1.AgentCodex {
		return ImagePrompt{Pastes: paths, Prompt: "\n" + content}
	}
	mentions := make([]string, len(paths))
	for i, p := range paths {
		mentions[i] = "@" + p
		if strings.ContainsAny(p, " \t\"") {
			mentions[i] = `@"` + p + `"`
		}
	}
	return ImagePrompt{Prompt: "Images: " + strings.Join(mentions, " ") + "\n" + content}
}

// AttachmentsDir is where the images of message name are put in a member's
// agent directory dir.
func AttachmentsDir(dir, name string) string {
	return filepath.Join(dir, "attachments", name)
}
