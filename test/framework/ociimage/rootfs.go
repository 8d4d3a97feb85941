package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// entryName is a tar entry's path without "./" or a trailing slash.
func entryName(h *tar.Header) string {
	n := strings.TrimPrefix(h.Name, "./")
	return strings.TrimSuffix(n, "/")
}

// normalize rewrites a header of a root filesystem tar the same way
// whatever tar wrote it: one time, numeric owners only, no atime or ctime,
// and of the PAX records only extended attributes (file capabilities).
func normalize(h *tar.Header, epoch time.Time) *tar.Header {
	out := &tar.Header{
		Typeflag: h.Typeflag,
		Name:     entryName(h),
		Linkname: strings.TrimPrefix(h.Linkname, "./"),
		Size:     h.Size,
		Mode:     h.Mode & 0o7777,
		Uid:      h.Uid,
		Gid:      h.Gid,
		ModTime:  epoch,
		Devmajor: h.Devmajor,
		Devminor: h.Devminor,
		Format:   tar.FormatPAX,
	}
	if h.Typeflag == tar.TypeDir {
		out.Name += "/"
	}
	if h.Typeflag == tar.TypeLink {
		out.Linkname = strings.TrimSuffix(out.Linkname, "/")
	}
	for k, v := range h.PAXRecords {
		if strings.HasPrefix(k, "SCHILY.xattr.") {
			if out.PAXRecords == nil {
				out.PAXRecords = map[string]string{}
			}
			out.PAXRecords[k] = v
		}
	}
	return out
}

// skipEntry says which entries of a root filesystem have no place in an
// image: the root itself, and device nodes, which the runtime makes.
func skipEntry(h *tar.Header) bool {
	n := entryName(h)
	return n == "" || n == "." || strings.HasPrefix(n, "dev/")
}

// signature is what makes two entries of two root filesystems the same.
type signature struct {
	header string
	sum    [32]byte
}

func signatureOf(h *tar.Header, content []byte) signature {
	var pax []string
	for k, v := range h.PAXRecords {
		pax = append(pax, k+"="+v)
	}
	slices.Sort(pax)
	return signature{
		header: fmt.Sprintf("%c %o %d:%d %s %d %d,%d %s", h.Typeflag, h.Mode, h.Uid, h.Gid, h.Linkname, h.Size, h.Devmajor, h.Devminor, strings.Join(pax, ",")),
		sum:    sha256.Sum256(content),
	}
}

// NormalizeRootfs copies the root filesystem tar src to dst with every
// header normalized, in src's order (mmdebstrap writes it sorted).
func NormalizeRootfs(src, dst string, epoch time.Time) error {
	return rewriteTar(src, dst, func(tw *tar.Writer, tr *tar.Reader) error {
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if skipEntry(h) {
				continue
			}
			if err := tw.WriteHeader(normalize(h, epoch)); err != nil {
				return err
			}
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
	})
}

// DiffRootfs writes to dst a layer that turns the root filesystem tar
// base into full: the entries of full that base lacks or has otherwise,
// and a whiteout for each path of base that full lacks. It is how the
// worker image shares the base layer of fleetd's image and adds only its
// packages on top.
func DiffRootfs(base, full, dst string, epoch time.Time) error {
	baseSigs := map[string]signature{}
	if err := readTar(base, func(h *tar.Header, content []byte) error {
		if !skipEntry(h) {
			n := normalize(h, epoch)
			baseSigs[entryName(n)] = signatureOf(n, content)
		}
		return nil
	}); err != nil {
		return err
	}
	inFull := map[string]bool{}
	return rewriteTar(full, dst, func(tw *tar.Writer, tr *tar.Reader) error {
		included := map[string]bool{}
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if skipEntry(h) {
				continue
			}
			content, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			n := normalize(h, epoch)
			name := entryName(n)
			inFull[name] = true
			if sig, ok := baseSigs[name]; ok && sig == signatureOf(n, content) {
				continue
			}
			if n.Typeflag == tar.TypeLink && !included[n.Linkname] {
				return fmt.Errorf("%s is a hard link to %s, which the base layer holds; a layer cannot link into a lower one", name, n.Linkname)
			}
			included[name] = true
			if err := tw.WriteHeader(n); err != nil {
				return err
			}
			if _, err := tw.Write(content); err != nil {
				return err
			}
		}
		// Whiteouts for what full removed, a removed directory once.
		var gone []string
		for name := range baseSigs {
			if !inFull[name] {
				gone = append(gone, name)
			}
		}
		slices.Sort(gone)
		var last string
		for _, name := range gone {
			if last != "" && strings.HasPrefix(name, last+"/") {
				continue
			}
			last = name
			wh := path.Join(path.Dir(name), ".wh."+path.Base(name))
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: wh, Mode: 0o644, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		return nil
	})
}

func readTar(path string, each func(*tar.Header, []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var buf bytes.Buffer
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		buf.Reset()
		if _, err := io.Copy(&buf, tr); err != nil {
			return err
		}
		if err := each(h, buf.Bytes()); err != nil {
			return err
		}
	}
}

func rewriteTar(src, dst string, body func(*tar.Writer, *tar.Reader) error) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst + ".partial")
	if err != nil {
		return err
	}
	tw := tar.NewWriter(out)
	if err := body(tw, tar.NewReader(in)); err != nil {
		out.Close()
		os.Remove(dst + ".partial")
		return fmt.Errorf("rewriting %s: %w", src, err)
	}
	if err := tw.Close(); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(dst+".partial", dst)
}
