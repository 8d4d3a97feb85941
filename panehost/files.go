package panehost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/memberfs"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// A member's files, read where its agent runs: a file it sends with a
// message (an image) must lie within its working directory, be a regular
// file and be small enough. It is read as memberfs reads a member's files
// (no link followed, nothing that blocks, nothing larger than asked for),
// and on a pane host that runs each workspace as a user of its own, as that
// user.

// MethodFileRead reads a file within a directory where the agent runs.
const MethodFileRead = "fleetd.file.read"

const resultFileRead = "file_read"

// Why a file is not read: memberfs's refusals.
var (
	// ErrOutside says the path leaves the directory by name.
	ErrOutside = memberfs.ErrOutside
	// ErrTooLarge says the file is larger than asked for.
	ErrTooLarge = memberfs.ErrTooLarge
	// ErrNotRegular says the path is a directory, a FIFO, a device, a
	// symbolic link or the like.
	ErrNotRegular = memberfs.ErrNotRegular
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
			read := func() (err error) { b, err = memberfs.ReadFileWithin(p.Root, p.Path, p.MaxBytes); return err }
			var err error
			if switched {
				err = memberfs.As(uid, read)
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

// ReadFile reads a file within root where the agent runs (see
// memberfs.ReadFileWithin).
func (Local) ReadFile(_ context.Context, root, path string, maxBytes int64) ([]byte, error) {
	return memberfs.ReadFileWithin(root, path, maxBytes)
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
