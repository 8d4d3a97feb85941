// Package browsertest drives headless Chromium in tests of fleetd's
// dashboard, over the DevTools protocol with chromedp: one browser per
// test with a fresh profile that is removed afterwards, tabs that fail
// their test on an uncaught script error, and screenshots kept as test
// artifacts in .artifacts/browser/ (git-ignored).
//
// Chromium is Debian's, at /usr/bin/chromium (hack/chromium.sh installs
// it; make test runs that). Where it is missing the tests that need it are
// skipped, or fail when FLEETD_REQUIRE_BROWSER is set (make test sets it).
package browsertest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"testing"
	"time"

	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Environment variables of the browser tests.
const (
	// RequireEnv turns a missing Chromium from a skip into a failure.
	RequireEnv = "FLEETD_REQUIRE_BROWSER"
	// PathEnv names a Chromium other than DefaultPath.
	PathEnv = "FLEETD_CHROMIUM"
	// ArtifactsEnv names the directory screenshots go to instead of
	// .artifacts/browser in the repository.
	ArtifactsEnv = "FLEETD_ARTIFACTS"
)

// DefaultPath is where Debian's chromium package puts the browser.
const DefaultPath = "/usr/bin/chromium"

// waitFor bounds every wait on the page. It is generous: it catches a
// hang, not slowness, on a small shared machine.
const waitFor = 60 * time.Second

// Browser is one headless Chromium.
type Browser struct {
	ctx context.Context
}

// Start runs a headless Chromium for the test, with an empty profile of
// its own; both end with the test. Without a browser the test is skipped,
// or fails under RequireEnv.
func Start(t testing.TB) *Browser {
	t.Helper()
	path := cmp.Or(os.Getenv(PathEnv), DefaultPath)
	if _, err := os.Stat(path); err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("no Chromium at %s (%v): run hack/chromium.sh, as make test does", path, err)
		}
		t.Skipf("needs Chromium at %s (hack/chromium.sh installs it): %v", path, err)
	}
	// A run's screenshots replace those of the test's last run.
	_ = os.RemoveAll(artifactsOf(t))
	profile, err := os.MkdirTemp("", "fleetd-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	// Headless, as root, with nothing that reaches beyond loopback: no
	// background fetches, component updates, sync or QUIC probes.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(profile),
		// Chromium's own temporary files go with the profile, not into
		// the machine's /tmp, where nothing would remove them.
		chromedp.Env("TMPDIR="+profile),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("no-first-run", true),
		chromedp.WindowSize(1440, 1000),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the browser to exit
		_ = os.RemoveAll(profile)
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return &Browser{ctx: ctx}
}

// Tab is one page of the browser.
type Tab struct {
	t      testing.TB
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	errors []string
	shots  int
}

// Tab opens a new page; it is closed when the test ends, if it is still
// open. An uncaught script error on it fails the test.
func (b *Browser) Tab(t testing.TB) *Tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	tab := &Tab{t: t, ctx: ctx, cancel: cancel}
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *cdpruntime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			tab.mu.Lock()
			tab.errors = append(tab.errors, fmt.Sprintf("%s (%s:%d)", msg, d.URL, d.LineNumber+1))
			tab.mu.Unlock()
		case *cdpruntime.EventConsoleAPICalled:
			var args []string
			for _, a := range ev.Args {
				args = append(args, cmp.Or(string(a.Value), a.Description))
			}
			t.Logf("console.%s %v", ev.Type, args)
		}
	})
	if err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	t.Cleanup(func() {
		tab.Close()
		tab.mu.Lock()
		defer tab.mu.Unlock()
		for _, e := range tab.errors {
			t.Errorf("uncaught script error: %s", e)
		}
	})
	return tab
}

// Close closes the page, as a person closing the tab does.
func (tab *Tab) Close() { tab.cancel() }

// Run runs actions on the page, failing the test (with a screenshot) if
// one fails.
func (tab *Tab) Run(actions ...chromedp.Action[chromedp.Void]) {
	tab.t.Helper()
	if _, err := run(tab, chromedp.Steps(actions...)); err != nil {
		tab.Screenshot("failed")
		tab.t.Fatalf("%v\npage text:\n%s", err, tab.text())
	}
}

func run[T any](tab *Tab, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(tab.ctx, waitFor)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// Resize gives the page a window of width by height CSS pixels, as a
// person resizing the browser does.
func (tab *Tab) Resize(width, height int64) {
	tab.t.Helper()
	tab.Run(chromedp.EmulateViewport(width, height))
}

// Eval evaluates a script expression on the page and returns its value.
func Eval[T any](tab *Tab, expr string) T {
	tab.t.Helper()
	v, err := run(tab, chromedp.Evaluate[T](expr))
	if err != nil {
		tab.Screenshot("failed")
		tab.t.Fatalf("evaluating %s: %v\npage text:\n%s", expr, err, tab.text())
	}
	return v
}

// Await evaluates a script expression on the page, waits for the promise
// it gives, and returns the promise's value.
func Await[T any](tab *Tab, expr string) T {
	tab.t.Helper()
	v, err := run(tab, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		tab.Screenshot("failed")
		tab.t.Fatalf("awaiting %s: %v\npage text:\n%s", expr, err, tab.text())
	}
	return v
}

// Exec evaluates a script statement on the page.
func (tab *Tab) Exec(script string) {
	tab.t.Helper()
	Eval[any](tab, "((() => { "+script+" })(), null)")
}

// WaitFor waits until a script expression is true on the page; what says
// what is awaited. The page polls it, at every animation frame.
func (tab *Tab) WaitFor(what, expr string) {
	tab.t.Helper()
	if _, err := run(tab, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(waitFor))); err != nil {
		tab.Screenshot("timeout")
		tab.t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, tab.text())
	}
}

// text is what the page shows, for failure messages.
func (tab *Tab) text() string {
	s, err := run(tab, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	return s
}

// Screenshot saves what the window shows as a PNG among the test's
// artifacts.
func (tab *Tab) Screenshot(name string) {
	tab.t.Helper()
	png, err := run(tab, chromedp.CaptureScreenshot())
	if err != nil {
		tab.t.Logf("screenshot %s: %v", name, err)
		return
	}
	tab.mu.Lock()
	tab.shots++
	n := tab.shots
	tab.mu.Unlock()
	dir := artifactsOf(tab.t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tab.t.Logf("screenshot %s: %v", name, err)
		return
	}
	file := filepath.Join(dir, fmt.Sprintf("%02d-%s.png", n, safeName.ReplaceAllString(name, "_")))
	if err := os.WriteFile(file, png, 0o644); err != nil {
		tab.t.Logf("screenshot %s: %v", name, err)
		return
	}
	tab.t.Logf("screenshot: %s", file)
}

// artifactsOf is the directory of a test's screenshots.
func artifactsOf(t testing.TB) string {
	return filepath.Join(Artifacts(), safeName.ReplaceAllString(t.Name(), "_"))
}

var safeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// Artifacts is where screenshots go: ArtifactsEnv, else .artifacts/browser
// in the repository.
func Artifacts() string {
	if dir := os.Getenv(ArtifactsEnv); dir != "" {
		return dir
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", ".artifacts", "browser")
}

// Quote is s as a script string literal.
func Quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
