package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/memberfs"
	"github.com/fleetd/fleetd/internal/testutil"
)

// workingDirFiles reads members' files on this machine, as fleetd beside a
// pane server that shares its filesystem does.
type workingDirFiles struct{}

func (workingDirFiles) ReadFile(_ context.Context, m *fleetv1alpha1.Member, path string, maxBytes int64) ([]byte, error) {
	return memberfs.ReadFileWithin(m.Status.WorkingDir, path, maxBytes)
}

// pngOf is a w by h PNG of one colour.
func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{R: 200, A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestTeamMessageImages: images go with a team message, from a member's
// working directory or as bytes in the call; they are stored once, in a
// Secret the Delegations own, and named in each Delegation by digest. A
// recipient that cannot take images, a path outside the sender's working
// directory, too many or too large images, or bytes that are no image are
// refused with a code, and nothing is sent.
func TestTeamMessageImages(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MemberFiles: workingDirFiles{}})
	create(t,
		testutil.MakeProfile("cc", ns).Agent(fleetv1alpha1.AgentClaude).Obj(),
		testutil.MakeProfile("plain", ns).Command("scripted-agent").Obj(),
	)
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	shot := pngOf(t, 4, 3)
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	full := append(pngOf(t, 1, 1), make([]byte, fleetv1alpha1.MaxImageBytes)...)[:fleetv1alpha1.MaxImageBytes]
	for path, b := range map[string][]byte{filepath.Join(work, "shot.png"): shot, filepath.Join(dir, "outside.png"): shot, filepath.Join(work, "notes.txt"): []byte("plain words"), filepath.Join(work, "full.png"): full} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../outside.png", filepath.Join(work, "escape.png")); err != nil {
		t.Fatal(err)
	}
	addMember(t, testutil.MakeMember("cc", ns).Profile("cc").Team("t", fleetv1alpha1.RoleMember).Obj())
	sender, senderToken := addMember(t, testutil.MakeMember("sender", ns).Profile("cc").Team("t", fleetv1alpha1.RoleLead).Obj())
	env.SetMemberStatus(t, sender, func(st *fleetv1alpha1.MemberStatus) { st.AgentKind, st.WorkingDir = fleetv1alpha1.AgentClaude, work })
	addMember(t, testutil.MakeMember("plain", ns).Profile("plain").Team("t", fleetv1alpha1.RoleMember).Obj())
	primary := h.connect(t, staticToken, nil)
	member := h.connect(t, senderToken, nil)
	testutil.Eventually(t, "", func() error { // the cache shows the sender's working directory
		got := callTool[TeamMessageOutput](t, member, "team_message", map[string]any{"recipient": "cc", "content": "look", "imagePaths": []string{"shot.png"}})
		return errIf(got.err != nil, "%v", got.err)
	})

	d := waitDelegation(t, ns, "cc", func(d *fleetv1alpha1.Delegation) bool { return d.Spec.Images != nil })
	items := d.Spec.Images.Items
	if len(items) != 1 || items[0].MediaType != "image/png" || items[0].SHA256 != digest(shot) || items[0].Size != int64(len(shot)) || items[0].Name != "shot.png" || items[0].Key != "0.png" {
		t.Fatalf("the Delegation's images: %+v", d.Spec.Images)
	}
	secret := &corev1.Secret{}
	testutil.Eventually(t, "", func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: d.Spec.Images.SecretName}, secret); err != nil {
			return err
		}
		owners := secret.OwnerReferences
		return errIf(len(owners) != 1 || owners[0].Kind != "Delegation" || owners[0].UID != d.UID, "owners %+v, want the Delegation", owners)
	})
	if secret.Type != fleetv1alpha1.SecretTypeImages || !bytes.Equal(secret.Data["0.png"], shot) || len(secret.Labels) != 0 {
		t.Errorf("the images' Secret: type %q, labels %v, %d bytes", secret.Type, secret.Labels, len(secret.Data["0.png"]))
	}

	// A primary passes the bytes, also as a data: URL.
	inline := []map[string]any{{"data": base64.StdEncoding.EncodeToString(shot), "name": "a.png"}, {"data": "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngOf(t, 2, 2))}}
	got := callTool[TeamMessageOutput](t, primary, "team_message", map[string]any{"team": "t", "recipient": "cc", "content": "two", "images": inline})
	if got.err != nil || len(got.out.DispatchIDs) != 1 {
		t.Fatalf("a primary's images: %+v %v", got.out, got.err)
	}
	if d := env.Delegation(t, ns, got.out.DispatchIDs[0]); d.Spec.Images == nil || len(d.Spec.Images.Items) != 2 || d.Spec.Images.Items[1].Name != "images[1]" {
		t.Errorf("a primary's images: %+v", d.Spec.Images)
	}

	big := append(pngOf(t, 1, 1), make([]byte, fleetv1alpha1.MaxImageBytes)...)
	refused := map[string]struct {
		as   string
		args map[string]any
		want toolerr.Code
	}{
		"a plain command among the recipients": {as: "primary", args: map[string]any{"team": "t", "recipient": "broadcast", "content": "all", "images": inline[:1]}, want: toolerr.UnsupportedProviderImages},
		"a plain command":                      {as: "primary", args: map[string]any{"team": "t", "recipient": "plain", "content": "x", "images": inline[:1]}, want: toolerr.UnsupportedProviderImages},
		"paths from a primary":                 {as: "primary", args: map[string]any{"team": "t", "recipient": "cc", "content": "x", "imagePaths": []string{"/etc/hostname"}}, want: toolerr.InvalidArgument},
		"a path up and out":                    {as: "member", args: map[string]any{"recipient": "cc", "content": "x", "imagePaths": []string{"../outside.png"}}, want: toolerr.Forbidden},
		"an absolute path outside":             {as: "member", args: map[string]any{"recipient": "cc", "content": "x", "imagePaths": []string{filepath.Join(dir, "outside.png")}}, want: toolerr.Forbidden},
		"a link out":                           {as: "member", args: map[string]any{"recipient": "cc", "content": "x", "imagePaths": []string{"escape.png"}}, want: toolerr.InvalidArgument}, // a link is never followed: it is no regular file
		"a file that is not there":             {as: "member", args: map[string]any{"recipient": "cc", "content": "x", "imagePaths": []string{"gone.png"}}, want: toolerr.NotFound},
		"a file that is no image":              {as: "member", args: map[string]any{"recipient": "cc", "content": "x", "imagePaths": []string{"notes.txt"}}, want: toolerr.InvalidArgument},
		"bytes that are no image":              {as: "primary", args: map[string]any{"team": "t", "recipient": "cc", "content": "x", "images": []map[string]any{{"data": base64.StdEncoding.EncodeToString([]byte("hello"))}}}, want: toolerr.InvalidArgument},
		"bytes that are no base64":             {as: "primary", args: map[string]any{"team": "t", "recipient": "cc", "content": "x", "images": []map[string]any{{"data": "%%%"}}}, want: toolerr.InvalidArgument},
		"files too large together":             {as: "member", args: map[string]any{"recipient": "cc", "content": "x", "imagePaths": []string{"full.png", "shot.png"}}, want: toolerr.ImageTooLarge},
		"too large":                            {as: "primary", args: map[string]any{"team": "t", "recipient": "cc", "content": "x", "images": []map[string]any{{"data": base64.StdEncoding.EncodeToString(big)}}}, want: toolerr.ImageTooLarge},
		"too many":                             {as: "primary", args: map[string]any{"team": "t", "recipient": "cc", "content": "x", "images": append(append(inline, inline...), inline[0])}, want: toolerr.InvalidArgument},
	}
	before := delegationsTo(t, ns)
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			cs := primary
			if tc.as == "member" {
				cs = member
			}
			wantCode(t, callTool[TeamMessageOutput](t, cs, "team_message", tc.args), tc.want)
		})
	}
	if after := delegationsTo(t, ns); after != before {
		t.Errorf("refused messages were sent: %d delegations, then %d", before, after)
	}
	var secrets corev1.SecretList
	if err := env.Client.List(context.Background(), &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	stored := 0
	for _, s := range secrets.Items {
		if s.Type == fleetv1alpha1.SecretTypeImages {
			stored++
		}
	}
	if stored != 2 {
		t.Errorf("%d images' Secrets, want the two messages' that were sent", stored)
	}
}

// TestTeamManageOnboardingImages: a member added with a message gets it,
// with its images, as its first message; images for a Profile whose agent
// cannot take them add nobody.
func TestTeamManageOnboardingImages(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	create(t,
		testutil.MakeProfile("cc", ns).Agent(fleetv1alpha1.AgentClaude).Obj(),
		testutil.MakeProfile("plain", ns).Command("scripted-agent").Default().Obj(),
	)
	primary := h.connect(t, staticToken, nil)
	images := []map[string]any{{"data": base64.StdEncoding.EncodeToString(pngOf(t, 3, 3)), "name": "plan.png"}}
	wantCode(t, callTool[TeamManageOutput](t, primary, "team_manage", map[string]any{"action": "add", "team": "t", "name": "nope", "message": "start", "images": images}), toolerr.UnsupportedProviderImages)
	wantCode(t, callTool[TeamManageOutput](t, primary, "team_manage", map[string]any{"action": "add", "team": "t", "profile": "cc", "images": images}), toolerr.InvalidArgument)
	wantCode(t, callTool[TeamManageOutput](t, primary, "team_manage", map[string]any{"action": "remove", "team": "t", "name": "x", "message": "bye"}), toolerr.InvalidArgument)
	var none fleetv1alpha1.MemberList
	if err := env.Client.List(context.Background(), &none, client.InNamespace(ns)); err != nil || len(none.Items) != 0 {
		t.Fatalf("refused adds added %d members (%v)", len(none.Items), err)
	}

	got := callTool[TeamManageOutput](t, primary, "team_manage", map[string]any{"action": "add", "team": "t", "profile": "cc", "name": "w1", "message": "here is the plan", "images": images})
	out := wantOK(t, got)
	if out.Member == nil || out.Member.Name != "w1" || out.DispatchID == "" {
		t.Fatalf("add with a message: %+v", out)
	}
	d := env.Delegation(t, ns, out.DispatchID)
	if d.Spec.To != "w1" || d.Spec.Content != "here is the plan" || *d.Spec.Wait || d.Spec.Images == nil || d.Spec.Images.Items[0].Name != "plan.png" {
		t.Errorf("the first message: %+v", d.Spec)
	}
	plain := wantOK(t, callTool[TeamManageOutput](t, primary, "team_manage", map[string]any{"action": "add", "team": "t", "name": "w2", "message": "no pictures"}))
	if plain.DispatchID == "" || env.Delegation(t, ns, plain.DispatchID).Spec.Images != nil {
		t.Errorf("a first message without images: %+v", plain)
	}
}

// delegationsTo counts the Delegations of ns.
func delegationsTo(t *testing.T, ns string) int {
	t.Helper()
	var list fleetv1alpha1.DelegationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}
