package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/textcut"
	"github.com/fleetd/fleetd/panehost"
)

// Images sent with a message (team_message, team_manage's onboarding
// message). A member names files in its own working directory, read where
// its agent runs; a primary, whose files the gateway cannot reach (it may
// be on a laptop) and whose host's files the gateway must not hand out,
// passes the bytes in the call. Every image is checked to be one (PNG,
// JPEG, GIF, WebP, by its bytes), and all of a message's together are at
// most what one Secret holds. The bytes go into one Secret, which the
// message's Delegations name; the controller puts them where the member's
// agent reads them.

// The gateway writes the Secret with a message's images and gives it to
// the Delegations that carry them.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update

// MemberFiles reads the files a member sends, where its agent runs.
// *controllers.MemberFiles is one.
type MemberFiles interface {
	// ReadFile reads path, relative to m's working directory or absolute
	// within it, at most maxBytes; panehost's ErrOutside, ErrTooLarge,
	// ErrNotRegular and fs.ErrNotExist say why not.
	ReadFile(ctx context.Context, m *fleetv1alpha1.Member, path string, maxBytes int64) ([]byte, error)
}

// imageTypes are the types an image may be, with their files' extensions.
var imageTypes = map[string]string{"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}

// messageImage is one image of a message, read and checked.
type messageImage struct {
	name, mediaType string
	data            []byte
}

// messageImages reads and checks the images a caller sends with a message:
// files of a member's working directory (paths) and bytes in the call
// (inline).
func (s *service) messageImages(ctx context.Context, c *call, paths []string, inline []ImageInput) ([]messageImage, error) {
	n := len(paths) + len(inline)
	switch {
	case n == 0:
		return nil, nil
	case n > fleetv1alpha1.MaxImages:
		return nil, toolerr.New(toolerr.InvalidArgument, "%d images; a message carries at most %d", n, fleetv1alpha1.MaxImages)
	case len(paths) > 0 && c.who.Member == nil:
		return nil, toolerr.New(toolerr.InvalidArgument, "imagePaths name files in a member's own working directory, and you are not a member: pass the images' bytes in images instead")
	case len(paths) > 0 && s.opts.MemberFiles == nil:
		return nil, toolerr.New(toolerr.FeatureDisabled, "this gateway cannot read members' files; pass the images' bytes in images instead")
	}
	var out []messageImage
	total := 0
	tooLarge := toolerr.New(toolerr.ImageTooLarge, "the message's images come to more than %d bytes (1 MiB), all a message carries: send smaller or fewer images", fleetv1alpha1.MaxImageBytes)
	add := func(name string, b []byte) error {
		total += len(b)
		if total > fleetv1alpha1.MaxImageBytes {
			return tooLarge
		}
		mt := http.DetectContentType(b)
		if _, ok := imageTypes[mt]; !ok {
			return toolerr.New(toolerr.InvalidArgument, "%s is not a PNG, JPEG, GIF or WebP image (its bytes look like %s)", name, mt)
		}
		out = append(out, messageImage{name: name, mediaType: mt, data: b})
		return nil
	}
	for _, p := range paths {
		if total >= fleetv1alpha1.MaxImageBytes {
			return nil, tooLarge
		}
		b, err := s.opts.MemberFiles.ReadFile(ctx, c.who.Member, p, int64(fleetv1alpha1.MaxImageBytes-total))
		if err != nil {
			return nil, imagePathError(p, c.who.Member, err)
		}
		if err := add(filepath.Base(p), b); err != nil {
			return nil, err
		}
	}
	for i, in := range inline {
		data := in.Data
		if rest, ok := strings.CutPrefix(data, "data:"); ok {
			_, data, _ = strings.Cut(rest, ",")
		}
		b, err := base64.StdEncoding.DecodeString(data)
		name := in.Name
		if name == "" {
			name = fmt.Sprintf("images[%d]", i)
		}
		switch {
		case err != nil:
			return nil, toolerr.New(toolerr.InvalidArgument, "%s: data is not base64: %v", name, err)
		case len(b) == 0:
			return nil, toolerr.New(toolerr.InvalidArgument, "%s: data is empty", name)
		}
		if err := add(name, b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// imagePathError says why a member's image file cannot be sent.
func imagePathError(path string, m *fleetv1alpha1.Member, err error) error {
	switch {
	case errors.Is(err, panehost.ErrOutside):
		return toolerr.New(toolerr.Forbidden, "image %q is not within your working directory %s: send files from there", path, m.Status.WorkingDir)
	case errors.Is(err, panehost.ErrTooLarge):
		return toolerr.New(toolerr.ImageTooLarge, "image %q is larger than a message may carry (1 MiB for all its images)", path)
	case errors.Is(err, panehost.ErrNotRegular):
		return toolerr.New(toolerr.InvalidArgument, "image %q is not a file", path)
	case errors.Is(err, fs.ErrNotExist):
		return toolerr.New(toolerr.NotFound, "image %q does not exist in your working directory %s", path, m.Status.WorkingDir)
	}
	return toolerr.New(toolerr.Internal, "reading image %q where you run: %v", path, err)
}

// refuseImageless refuses images for recipients whose agents cannot take
// them; nothing is sent to any recipient then.
func refuseImageless(to []*fleetv1alpha1.Member, profiles []fleetv1alpha1.Profile) error {
	byName := make(map[string]*fleetv1alpha1.Profile, len(profiles))
	for i := range profiles {
		byName[profiles[i].Name] = &profiles[i]
	}
	for _, m := range to {
		if kind := agentKindOf(m, byName); !agents.TakesImages(kind) {
			what := "a plain command"
			if kind != "" {
				what = "agent " + string(kind)
			}
			return toolerr.New(toolerr.UnsupportedProviderImages, "member %s runs %s, which cannot take images (Claude Code and Codex can); nothing was sent", m.Name, what)
		}
	}
	return nil
}

// messageImagesSecret is the Secret that holds a message's images, owned
// by the recipients until the Delegations that carry them own it, and what
// the Delegations say of them; nothing is written yet (storeImages).
func messageImagesSecret(ns string, imgs []messageImage, to []*fleetv1alpha1.Member) (*fleetv1alpha1.DelegationImages, *corev1.Secret) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "images-"},
		Type:       fleetv1alpha1.SecretTypeImages,
		Data:       map[string][]byte{},
	}
	for _, m := range to {
		s.OwnerReferences = append(s.OwnerReferences, metav1.OwnerReference{
			APIVersion: fleetv1alpha1.GroupVersion.String(), Kind: "Member", Name: m.Name, UID: m.UID,
		})
	}
	spec := &fleetv1alpha1.DelegationImages{}
	for i, img := range imgs {
		key := fmt.Sprintf("%d.%s", i, imageTypes[img.mediaType])
		sum := sha256.Sum256(img.data)
		s.Data[key] = img.data
		spec.Items = append(spec.Items, fleetv1alpha1.DelegationImage{
			Key: key, MediaType: img.mediaType, Size: int64(len(img.data)), SHA256: hex.EncodeToString(sum[:]), Name: textcut.Head(strings.ToValidUTF8(img.name, "?"), 255),
		})
	}
	return spec, s
}

// storeImages writes secret, the Secret of a message's images, and names it in
// spec, which the message's Delegations carry. It is written once the
// Delegations were admitted, right before they are created, so that a
// refused message leaves no Secret behind (dropImages removes it when no
// Delegation was created after all).
func (s *service) storeImages(ctx context.Context, spec *fleetv1alpha1.DelegationImages, secret *corev1.Secret) error {
	if err := s.client.Create(ctx, secret); err != nil {
		return fmt.Errorf("storing the message's images: %w", err)
	}
	spec.SecretName = secret.Name
	return nil
}

// settleImages gives the images' Secret to the Delegations that were
// created (ownImages), or deletes it when none was: a message that was not
// sent leaves nothing behind.
func (s *service) settleImages(ctx context.Context, secret *corev1.Secret, sent []*fleetv1alpha1.Delegation) {
	if secret == nil || secret.Name == "" {
		return
	}
	if len(sent) > 0 {
		s.ownImages(ctx, secret, sent)
		return
	}
	// The caller's context may be what ended the call.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
		s.log.Info("Leaving the images of a message not sent with its recipients", "secret", secret.Name, "error", err.Error())
	}
}

// ownImages gives the images' Secret to the Delegations that carry them,
// so it goes when the last of them goes. Until then the recipients own it:
// a gateway stopped in between leaves it to go with them.
func (s *service) ownImages(ctx context.Context, secret *corev1.Secret, ds []*fleetv1alpha1.Delegation) {
	if secret == nil || len(ds) == 0 {
		return
	}
	secret.OwnerReferences = nil
	for _, d := range ds {
		secret.OwnerReferences = append(secret.OwnerReferences, metav1.OwnerReference{
			APIVersion: fleetv1alpha1.GroupVersion.String(), Kind: "Delegation", Name: d.Name, UID: d.UID,
		})
	}
	if err := s.client.Update(ctx, secret); err != nil {
		s.log.Info("Leaving a message's images with its recipients", "secret", secret.Name, "error", err.Error())
	}
}
