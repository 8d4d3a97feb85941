//go:build unix && !linux

package paneserver

// paneView is what a pane's mount namespace would show; there are none
// here.
type paneView struct {
	passwd, group, tmp string
}

// canMakeNamespaces is false: mount namespaces are Linux's.
func canMakeNamespaces() bool { return false }

// inNamespace runs start as it is.
func inNamespace(_ *paneView, start func() error) error { return start() }
