package agents

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

func TestPromptWithImages(t *testing.T) {
	cases := map[string]struct {
		kind  fleetv1alpha1.AgentKind
		paths []string
		want  ImagePrompt
	}{
		"claude mentions each image on a line before the message": {
			kind: fleetv1alpha1.AgentClaude, paths: []string{"/a/0.png", "/a/1.jpg"},
			want: ImagePrompt{Prompt: "Images: @/a/0.png @/a/1.jpg\nreply: seen"},
		},
		"claude quotes a path with a space": {
			kind: fleetv1alpha1.AgentClaude, paths: []string{"/state dir/0.png"},
			want: ImagePrompt{Prompt: "Images: @\"/state dir/0.png\"\nreply: seen"},
		},
		"codex pastes each path alone, then the message": {
			kind: fleetv1alpha1.AgentCodex, paths: []string{"/a/0.png", "/a/1.gif"},
			want: ImagePrompt{Pastes: []string{"/a/0.png", "/a/1.gif"}, Prompt: "\nreply: seen"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, PromptWithImages(tc.kind, tc.paths, "reply: seen")); diff != "" {
				t.Errorf("PromptWithImages (-want +got):\n%s", diff)
			}
		})
	}
	for kind, want := range map[fleetv1alpha1.AgentKind]bool{"claude": true, "codex": true, "gemini": false, "": false} {
		if got := TakesImages(kind); got != want {
			t.Errorf("TakesImages(%q) = %v, want %v", kind, got, want)
		}
	}
}
