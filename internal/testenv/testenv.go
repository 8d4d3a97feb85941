// Package testenv starts a real kube-apiserver and etcd (built from pinned
// modules by `make controlplane`) with fleetd's CRDs installed, for
// integration tests: one API server per test package, a namespace per test.
package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"go.uber.org/zap/zapcore"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/fleetd/fleetd/internal/scheme"
)

// Env is a running API server with fleetd's CRDs.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is an uncached client with fleetd's scheme.
	Client client.Client
	// Scheme has the built-in kinds and fleetd's.
	Scheme *k8sruntime.Scheme
	// CRDs are the installed CustomResourceDefinitions.
	CRDs []schema.GroupVersionResource

	env *envtest.Environment
}

// RepoRoot is the root of the fleetd checkout.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Scheme returns a scheme with the built-in kinds and fleetd's.
func Scheme() *k8sruntime.Scheme { return scheme.New() }

// Start starts an API server for the tests of one package. Call it from
// TestMain and Stop the result when the tests are done.
func Start() (*Env, error) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapLevel())))
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(RepoRoot(), "bin", "controlplane")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return nil, fmt.Errorf("no %s in %s: run `make controlplane` first (or set KUBEBUILDER_ASSETS): %w", b, assets, err)
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the API server from %s: %w", assets, err)
	}
	s := Scheme()
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	e := &Env{Config: cfg, Client: c, Scheme: s, env: env}
	for _, crd := range env.CRDs {
		for _, v := range crd.Spec.Versions {
			e.CRDs = append(e.CRDs, schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural})
		}
	}
	return e, nil
}

// Main runs a package's tests against one API server and stops it after.
// Use it as `func TestMain(m *testing.M) { testenv.Main(m, &env) }`.
func Main(m *testing.M, into **Env) {
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*into = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the API server:", err)
	}
	os.Exit(code)
}

// Stop stops the API server and etcd.
func (e *Env) Stop() error { return e.env.Stop() }

var namespaceSeq atomic.Int64

// Namespace creates a fresh namespace for one test and deletes it afterwards.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", namespaceSeq.Add(1), sanitize(t.Name()))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), ns) })
	return name
}

func sanitize(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return strings.Trim(b.String(), "-")
}

// zapLevel keeps test output to errors unless FLEETD_TEST_VERBOSE is set.
func zapLevel() zapcore.Level {
	if os.Getenv("FLEETD_TEST_VERBOSE") != "" {
		return zapcore.Level(-2)
	}
	return zapcore.ErrorLevel
}
