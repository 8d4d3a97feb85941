package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/test/framework/stubmodel"
)

// TestClaudeCodeTakesImages sends the real Claude Code a message with
// images, from a primary (their bytes in the call) and from a member (a
// file of its working directory), and as the first message of a member
// team_manage adds: the model's request for that turn holds each image,
// byte for byte. A plain command is refused images.
func TestClaudeCodeTakesImages(t *testing.T) { testImages(t, claudeCode, "cc-eyes") }

// TestCodexTakesImages is the same with Codex.
func TestCodexTakesImages(t *testing.T) { testImages(t, codexCLI, "cx-eyes") }

func testImages(t *testing.T, a realAgent, name string) {
	if _, ok := w.mode.(*local); !ok {
		t.Skip("the sending member works in a directory of this machine: local mode only")
	}
	requireRealAgents(t)
	dumpOnFailure(t)
	model, url := startModel(t)
	agentProfile(t, name+"-e2e", a.kind, url, "")
	team := name + "-team"
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: %s, namespace: %s}\nspec: {profile: %s-e2e, team: %s}\n", name, ns, name, team))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, name, "--wait=false") })
	waitReady(t, name)

	// A scripted member of the team; on this machine, working in a
	// directory of its own with an image in it (a pod member's directory
	// is in its Pod).
	_, onThisMachine := w.mode.(*local)
	fromFile := pngImage(t, 5, color.RGBA{G: 180, A: 255})
	workingDir := ""
	var work string
	if onThisMachine {
		var err error
		if work, err = os.MkdirTemp("", "e2e-images-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(work) })
		if err := os.Chmod(work, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "diagram.png"), fromFile, 0o644); err != nil {
			t.Fatal(err)
		}
		workingDir = ", workingDir: " + work
	}
	sender := name + "-pen"
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: %s, namespace: %s}\nspec: {command: [scripted-agent, --received-log, %s], team: %s%s}\n", sender, ns, w.receivedLog(sender), team, workingDir))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, sender, "--wait=false") })
	waitReady(t, sender)

	s := session(t, w.token)
	inCall := pngImage(t, 3, color.RGBA{R: 200, A: 255})
	r := call(t, s, "team_message", map[string]any{"team": team, "recipient": name, "content": "reply: seen the red one",
		"images": []map[string]any{{"data": base64.StdEncoding.EncodeToString(inCall), "name": "red.png"}}})
	if r.IsError {
		t.Fatalf("team_message with an image: %v", r.Fields)
	}
	ids, _ := r.Fields["dispatchIds"].([]any)
	testutil.Eventually(t, "the reply to the message with an image", func() (bool, string) {
		p := call(t, s, "bridge_poll", nil)
		return len(ids) == 1 && pollHas(p, fmt.Sprint(ids[0]), "reply", "seen the red one"), fmt.Sprint(p.Fields)
	})
	wantImage(t, model, "reply: seen the red one", inCall)

	// The scripted member sends a file of its working directory; a path
	// outside it is refused.
	if onThisMachine {
		ms := session(t, memberToken(t, sender))
		testutil.Eventually(t, "the sender's working directory known", func() (bool, string) {
			m, err := getMember(sender)
			return err == nil && m.Status.WorkingDir == work, fmt.Sprint(m.Status.WorkingDir)
		})
		if r := call(t, ms, "team_message", map[string]any{"recipient": name, "content": "reply: no", "imagePaths": []string{"/etc/hostname"}}); r.ErrorCode() != "forbidden" {
			t.Errorf("a path outside the working directory: %v", r.Fields)
		}
		// The reply is typed into the sender's pane; a silent: in it ends
		// the exchange there.
		if r := call(t, ms, "team_message", map[string]any{"recipient": name, "content": "reply: silent: seen the diagram", "imagePaths": []string{"diagram.png"}}); r.IsError {
			t.Fatalf("team_message with a member's file: %v", r.Fields)
		}
		testutil.Eventually(t, "the model's turn with the member's file", func() (bool, string) {
			return hasImage(model, "reply: silent: seen the diagram", fromFile), fmt.Sprint(model.Turns())
		})
	}

	// A member added to the team gets its first message with an image.
	added := call(t, s, "team_manage", map[string]any{"action": "add", "team": team, "profile": name + "-e2e", "name": name + "-new",
		"message": "reply: onboarded with the plan", "images": []map[string]any{{"data": base64.StdEncoding.EncodeToString(fromFile), "name": "plan.png"}}})
	if added.IsError || added.Str("dispatchId") == "" {
		t.Fatalf("team_manage add with a first message: %v", added.Fields)
	}
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, name+"-new", "--wait=false") })
	testutil.Eventually(t, "the new member's reply", func() (bool, string) {
		p := call(t, s, "bridge_poll", nil)
		return pollHas(p, added.Str("dispatchId"), "reply", "onboarded with the plan"), fmt.Sprint(p.Fields)
	})
	wantImage(t, model, "reply: onboarded with the plan", fromFile)

	// A plain command takes no images: nothing is sent.
	if r := call(t, s, "team_message", map[string]any{"team": team, "recipient": sender, "content": "reply: never",
		"images": []map[string]any{{"data": base64.StdEncoding.EncodeToString(inCall)}}}); r.ErrorCode() != "unsupported_provider_images" {
		t.Errorf("images to a plain command: %v", r.Fields)
	}
	// The next message it gets is the first it was sent.
	wantOutcome(t, call(t, s, "bridge_send", map[string]any{"sessionId": sender, "content": "reply: words only"}), "reply")
	if got := received(t, w.receivedLog(sender)); slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, "never") }) || !slices.Contains(got, "reply: words only") {
		t.Errorf("the scripted member received %q, want the message without images and not the one with", got)
	}
}

// wantImage waits for the model's turn that prompt starts to carry img.
func wantImage(t *testing.T, model *stubmodel.Server, prompt string, img []byte) {
	t.Helper()
	testutil.Eventually(t, "the image in the model's request", func() (bool, string) {
		return hasImage(model, prompt, img), fmt.Sprint(model.Turns())
	})
}

// hasImage reports whether a turn request whose prompt holds prompt
// carried img, byte for byte.
func hasImage(model *stubmodel.Server, prompt string, img []byte) bool {
	sum := sha256.Sum256(img)
	want := hex.EncodeToString(sum[:])
	for _, r := range model.Requests() {
		if r.Kind == stubmodel.KindTurn && strings.Contains(r.Prompt, prompt) && slices.ContainsFunc(r.Images, func(i stubmodel.Image) bool { return i.SHA256 == want }) {
			return true
		}
	}
	return false
}

// pngImage is a size by size PNG of one colour.
func pngImage(t *testing.T, size int, c color.RGBA) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, size, size))
	for x := range size {
		for y := range size {
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
