// Package testenv starts a real kube-apiserver and etcd (built from pinned
// modules by `make controlplane`) with fleetd's CRDs installed, for
// integration tests: one API server per test package, a namespace per test.
//
// The API server starts lazily, when the first test asks for it (Namespace
// or Require), so a package's pure table tests run in milliseconds on a
// machine with only Go. Where the control plane is not built, the tests
// that need it are skipped, or fail when FLEETD_REQUIRE_APISERVER is set
// (make test sets it, so nothing is skipped silently there).
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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

// RequireEnv names the variable that turns a missing control plane from a
// skip into a failure.
const RequireEnv = "FLEETD_REQUIRE_APISERVER"

// Env is a package's API server with fleetd's CRDs. Its fields are set once
// it has started: after Namespace or Require returned.
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

	once     sync.Once
	startErr error
}

// RepoRoot is the root of the fleetd checkout.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Scheme returns a scheme with the built-in kinds and fleetd's.
func Scheme() *k8sruntime.Scheme { return scheme.New() }

// start starts the API server.
func (e *Env) start() error {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapLevel())))
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(RepoRoot(), "bin", "controlplane")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return &missingError{fmt.Errorf("no %s in %s: run `make controlplane` first (or set KUBEBUILDER_ASSETS): %w", b, assets, err)}
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the API server from %s: %w", assets, err)
	}
	s := Scheme()
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		_ = env.Stop()
		return fmt.Errorf("creating a client: %w", err)
	}
	e.Config, e.Client, e.Scheme, e.env = cfg, c, s, env
	for _, crd := range env.CRDs {
		for _, v := range crd.Spec.Versions {
			e.CRDs = append(e.CRDs, schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural})
		}
	}
	return nil
}

// missingError says the control plane is not built here.
type missingError struct{ error }

func (e *missingError) Unwrap() error { return e.error }

// Require starts the API server the first time a test asks for it, and
// skips (or fails, see RequireEnv) a test that cannot have one.
func (e *Env) Require(t testing.TB) {
	t.Helper()
	e.once.Do(func() { e.startErr = e.start() })
	var missing *missingError
	switch {
	case e.startErr == nil:
	case errors.As(e.startErr, &missing) && os.Getenv(RequireEnv) == "":
		t.Skipf("needs an API server: %v", e.startErr)
	default:
		t.Fatal(e.startErr)
	}
}

// Main runs a package's tests, giving them an API server that starts when
// the first test asks for it, and stops it after; then it runs cleanup,
// since nothing deferred in TestMain outlives the exit. Use it as
// `func TestMain(m *testing.M) { testenv.Main(m, &env) }`.
func Main(m *testing.M, into **Env, cleanup ...func()) {
	e := &Env{}
	*into = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the API server:", err)
	}
	for _, f := range cleanup {
		f()
	}
	os.Exit(code)
}

// Stop stops the API server and etcd, if they started.
func (e *Env) Stop() error {
	if e.env == nil {
		return nil
	}
	return e.env.Stop()
}

var namespaceSeq atomic.Int64

// Namespace creates a fresh namespace for one test and deletes it afterwards.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	e.Require(t)
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
