// Package ociimage builds OCI images without a container engine, and
// reproducibly: the same inputs give the same layer and image digests. A
// layer is a tar written here with every entry's time set to one epoch,
// owners given explicitly, entries in a fixed order and no names of users
// or groups; the image's creation time is the same epoch. Images go into an
// OCI archive that `ctr images import` and `docker load` both take.
package ociimage

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one entry of a layer.
type File struct {
	// Path is where it goes in the image, absolute.
	Path string
	// Source is a file on this machine whose content it takes; Data is the
	// content itself when Source is empty.
	Source string
	Data   []byte
	// Mode holds the permission bits, and fs.ModeDir or fs.ModeSymlink.
	Mode fs.FileMode
	// Link is a symlink's target.
	Link     string
	UID, GID int
}

// Epoch is the time every entry and the image carry: SOURCE_DATE_EPOCH
// when set, else the Unix epoch, as reproducible image builders do.
func Epoch() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	var sec int64
	if _, err := fmt.Sscan(v, &sec); err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", v)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// WriteLayerTar writes files as a tar to w: parents before children,
// entries sorted, missing parent directories added (root-owned, 0755).
func WriteLayerTar(w io.Writer, files []File, epoch time.Time) error {
	byPath := map[string]File{}
	for _, f := range files {
		p := cleanPath(f.Path)
		f.Path = p
		byPath[p] = f
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d, Mode: fs.ModeDir | 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		f := byPath[p]
		if err := writeEntry(tw, f, epoch); err != nil {
			return fmt.Errorf("adding %s: %w", p, err)
		}
	}
	return tw.Close()
}

func cleanPath(p string) string {
	return path.Clean("/" + p)
}

func writeEntry(tw *tar.Writer, f File, epoch time.Time) error {
	h := &tar.Header{
		Name:    strings.TrimPrefix(f.Path, "/"),
		Mode:    int64(f.Mode.Perm()),
		Uid:     f.UID,
		Gid:     f.GID,
		ModTime: epoch,
		Format:  tar.FormatPAX,
	}
	switch {
	case f.Mode&fs.ModeDir != 0:
		h.Typeflag = tar.TypeDir
		h.Name += "/"
		return tw.WriteHeader(h)
	case f.Mode&fs.ModeSymlink != 0:
		h.Typeflag = tar.TypeSymlink
		h.Linkname = f.Link
		return tw.WriteHeader(h)
	}
	h.Typeflag = tar.TypeReg
	if f.Source == "" {
		h.Size = int64(len(f.Data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(f.Data)
		return err
	}
	src, err := os.Open(f.Source)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	h.Size = fi.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

// TreeFiles are the files of the directory root on this machine, placed
// under dest in the image and owned by uid:gid, with their permission bits
// kept. Symlinks stay symlinks.
func TreeFiles(root, dest string, uid, gid int) ([]File, error) {
	var out []File
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		f := File{Path: path.Join(dest, filepath.ToSlash(rel)), Mode: fi.Mode() & (fs.ModeDir | fs.ModeSymlink | fs.ModePerm), UID: uid, GID: gid}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if f.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			f.Source = p
		case !fi.IsDir():
			// Sockets and devices have no place in an image.
			return nil
		}
		out = append(out, f)
		return nil
	})
	return out, err
}

// LayerFromTar makes a gzip-compressed layer of the tar at tarPath. gzip at
// a fixed level of one Go release compresses the same bytes the same way,
// so the digest is as reproducible as the tar.
func LayerFromTar(tarPath string) (v1.Layer, error) {
	return tarball.LayerFromFile(tarPath, tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
}

// LayerFromFiles writes files as a tar in dir and makes a layer of it.
func LayerFromFiles(dir, name string, files []File, epoch time.Time) (v1.Layer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, name+".tar")
	f, err := os.Create(p)
	if err != nil {
		return nil, err
	}
	if err := WriteLayerTar(f, files, epoch); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return LayerFromTar(p)
}
