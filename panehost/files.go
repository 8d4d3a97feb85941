package panehost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/herdr/paneserver"
)

// A member's files, read where its agent runs: a file it sends with a
// message (an image) must lie within its working directory, be a regular
// file and be small enough. Reading follows symbolic links only while they
// stay within the directory, and on a pane host that runs each workspace
// as a user of its own, reads as that user.

// MethodFileRead reads a file within a directory where the agent runs.
const MethodFileRead = "fleetd.file.read"

const resultFileRead = "file_read"

// Why a file is not read.
var (
	// ErrOutside says the path leaves the directory, by name or by a link.
	ErrOutside = errors.New("the path is not within the directory")
	// ErrTooLarge says the file is larger than asked for.
	ErrTooLarge = errors.New("the file is too large")
	// ErrNotRegular says the path is a directory, a device or the like.
	ErrNotRegular = errors.New("not a regular file")
)

// Refusals as fleetd.file.read answers them, and the errors they are.
var fileRefusals = map[string]error{
	"outside": ErrOutside, "too_large": ErrTooLarge, "not_regular": ErrNotRegular, "not_found": fs.ErrNotExist,
}

// FileReadParams are the params of fleetd.file.read.
type FileReadParams struct {
	// Root is the directory the file must lie within: absolute.
	Root string `json:"root"`
	// Path is the file, relative to Root or absolute within it.
	Path string `json:"path"`
	// User is the label of the workspace whose user reads it (see
	// InstallParams.User).
	User string `json:"user,omitempty"`
	// MaxBytes bounds the file's size.
	MaxBytes int64 `json:"max_bytes"`
}

// fileRead is the answer of fleetd.file.read: the content, or why not.
type fileRead struct {
	Type    string `json:"type"`
	Content []byte `json:"content,omitempty"`
	Refused string `json:"refused,omitempty"`
	Message string `json:"message,omitempty"`
}

// ReadWithin reads the file path within the directory root, at most max
// bytes. A relative path is taken from root.
func ReadWithin(root, path string, maxBytes int64) ([]byte, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("directory %q is not absolute", root)
	}
	rel := path
	if filepath.IsAbs(path) {
		var err error
		if rel, err = filepath.Rel(filepath.Clean(root), filepath.Clean(path)); err != nil {
			return nil, ErrOutside
		}
	}
	rel = filepath.Clean(rel)
	if rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return nil, ErrOutside
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.Open(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, err
	case err != nil && strings.Contains(err.Error(), "path escapes from parent"):
		// os.Root says a link led out of the directory only in words.
		return nil, ErrOutside
	case err != nil:
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, ErrNotRegular
	case fi.Size() > maxBytes:
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, fi.Size(), maxBytes)
	}
	// The file may grow while it is read.
	b, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err == nil && int64(len(b)) > maxBytes {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, maxBytes)
	}
	return b, err
}

// refusalOf names err for a fleetd.file.read answer; "" for an error that
// is not a refusal.
func refusalOf(err error) string {
	for name, e := range fileRefusals {
		if errors.Is(err, e) {
			return name
		}
	}
	return ""
}

// fileExtensions are the file methods of a pane host; owner says whose a
// workspace's files are.
func fileExtensions(owner func(label string) (uint32, bool, *herdr.Error)) map[string]paneserver.Extension {
	return map[string]paneserver.Extension{
		MethodFileRead: func(_ context.Context, raw json.RawMessage) (any, *herdr.Error) {
			var p FileReadParams
			if err := decode(raw, &p); err != nil {
				return nil, err
			}
			if p.MaxBytes <= 0 {
				return nil, &herdr.Error{Code: herdr.CodeInvalidParams, Message: "max_bytes must be positive"}
			}
			uid, switched, herr := owner(p.User)
			if herr != nil {
				return nil, herr
			}
			var b []byte
			read := func() (err error) { b, err = ReadWithin(p.Root, p.Path, p.MaxBytes); return err }
			var err error
			if switched {
				err = asUser(uid, read)
			} else {
				err = read()
			}
			out := fileRead{Type: resultFileRead, Content: b}
			if err != nil {
				out = fileRead{Type: resultFileRead, Refused: refusalOf(err), Message: err.Error()}
				if out.Refused == "" && errors.Is(err, fs.ErrPermission) {
					// What the member's user may not read is not its to send.
					out.Refused = "outside"
				}
				if out.Refused == "" {
					return nil, &herdr.Error{Code: herdr.CodeInternalError, Message: "reading " + p.Path + ": " + err.Error()}
				}
			}
			return out, nil
		},
	}
}

// ReadFile reads a file within root where the agent runs (see ReadWithin).
func (Local) ReadFile(_ context.Context, root, path string, maxBytes int64) ([]byte, error) {
	return ReadWithin(root, path, maxBytes)
}

// ReadFile reads a file within root in the pane host, as the workspace's
// user where it has one.
func (r Remote) ReadFile(ctx context.Context, root, path string, maxBytes int64) ([]byte, error) {
	var out fileRead
	if err := r.Client.Call(ctx, MethodFileRead, FileReadParams{Root: root, Path: path, User: r.User, MaxBytes: maxBytes}, resultFileRead, &out); err != nil {
		return nil, err
	}
	if out.Refused != "" {
		if e, ok := fileRefusals[out.Refused]; ok {
			return nil, fmt.Errorf("%w: %s", e, out.Message)
		}
		return nil, errors.New(out.Message)
	}
	return out.Content, nil
}
