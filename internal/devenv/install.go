package devenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/config/admission"
	"github.com/fleetd/fleetd/config/crd"
	"github.com/fleetd/fleetd/config/samples"
)

const fieldOwner = client.FieldOwner("fleetd-dev")

// InstallCRDs applies fleetd's CRDs and waits until they are served.
func InstallCRDs(ctx context.Context, c client.Client) error {
	objs, err := decodeAll(crd.Bases, "bases")
	if err != nil {
		return err
	}
	for _, u := range objs {
		if err := apply(ctx, c, u); err != nil {
			return fmt.Errorf("applying %s: %w", u.GetName(), err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, u := range objs {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: u.GetName()}, got); err != nil {
				return false, nil
			}
			established := false
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					established = true
				}
			}
			if !established {
				return false, nil
			}
		}
		return true, nil
	})
}

// InstallPolicies applies fleetd's admission policies (config/admission):
// the API server sets a left-out Delegation sender to its creator and
// refuses one that names someone else, and keeps a Member's Pod within
// what a Member may ask for. It waits until the API server applies them:
// a Delegation without a sender then passes, and a Member that names an
// image for its Pod is refused (dry runs in namespace ns).
func InstallPolicies(ctx context.Context, c client.Client, ns string) error {
	objs, err := decodeAll(admission.Policies, ".")
	if err != nil {
		return err
	}
	for _, u := range objs {
		if err := apply(ctx, c, u); err != nil {
			return fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		probe := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": fleetv1alpha1.GroupVersion.String(), "kind": "Delegation",
			"metadata": map[string]any{"generateName": "policy-probe-", "namespace": ns},
			"spec":     map[string]any{"to": "nobody", "content": "probe"},
		}}
		if last = c.Create(ctx, probe, client.DryRunAll); last != nil {
			return false, nil
		}
		member := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": fleetv1alpha1.GroupVersion.String(), "kind": "Member",
			"metadata": map[string]any{"generateName": "policy-probe-", "namespace": ns},
			"spec":     map[string]any{"command": []any{"sh"}, "runtime": "Pod", "pod": map[string]any{"image": "probe"}},
		}}
		if err := c.Create(ctx, member, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "spec.pod.image") {
			last = fmt.Errorf("a Member naming an image for its Pod: %v, want a refusal", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the API server to apply fleetd's admission policies: %w (last: %v)", err, last)
	}
	return nil
}

// ApplySampleProfiles applies the sample Profiles to namespace ns.
func ApplySampleProfiles(ctx context.Context, c client.Client, ns string) error {
	objs, err := decodeAll(samples.Files, ".")
	if err != nil {
		return err
	}
	for _, u := range objs {
		if u.GetKind() != "Profile" {
			continue
		}
		u.SetNamespace(ns)
		if err := apply(ctx, c, u); err != nil {
			return fmt.Errorf("applying profile %s: %w", u.GetName(), err)
		}
	}
	return nil
}

// StaticTokenSecret is the Secret holding the dev environment's primary token.
const StaticTokenSecret = "fleetd-dev-tokens"

// PrimaryName is the principal the dev token stands for.
const PrimaryName = "dev"

// EnsurePrimaryToken returns the dev primary's static token, kept in the
// state directory so a second run reuses it, and makes sure the Secret in
// namespace ns holds it.
func EnsurePrimaryToken(ctx context.Context, c client.Client, dir, ns string) (string, error) {
	path := filepath.Join(dir, "primary-token")
	raw, err := os.ReadFile(path)
	token := strings.TrimSpace(string(raw))
	if err != nil || token == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		token = hex.EncodeToString(b)
		if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
			return "", err
		}
	}
	secret := corev1ac.Secret(StaticTokenSecret, ns).
		WithLabels(map[string]string{fleetv1alpha1.LabelStaticToken: "true"}).
		WithData(map[string][]byte{PrimaryName: []byte(token)})
	if err := c.Apply(ctx, secret, fieldOwner, client.ForceOwnership); err != nil {
		return "", fmt.Errorf("applying the static token secret: %w", err)
	}
	return token, nil
}

// apply server-side applies an object as fleetd dev.
func apply(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), fieldOwner, client.ForceOwnership)
}

// EnsureNamespace creates ns if it does not exist.
func EnsureNamespace(ctx context.Context, c client.Client, ns string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func decodeAll(fsys fs.FS, dir string) ([]*unstructured.Unstructured, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		data, err := fs.ReadFile(fsys, filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("decoding %s: %w", e.Name(), err)
			}
			if len(u.Object) > 0 {
				out = append(out, u)
			}
		}
	}
	return out, nil
}
