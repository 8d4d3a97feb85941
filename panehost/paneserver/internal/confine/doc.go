// Package confine is the process side of a pane's confinement: the
// launcher that starts a pane's shell and the sweeper that ends a
// workspace user's processes. Both are the server's own binary run again
// under a name of their own; this package's init recognises the name and
// does the work. It imports nothing but the standard library, so Go
// initialises it early (a package is initialised as soon as what it
// imports is, in import-path order), and the launcher does not pay for
// the initialisation of the whole server.
package confine
