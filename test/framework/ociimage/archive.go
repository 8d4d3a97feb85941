package ociimage

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is an image to build: its layers, bottom first, and its config.
type Spec struct {
	// Ref is the name it is imported under, such as
	// docker.io/library/fleetd:dev: what a pod's image field resolves to.
	Ref    string
	Layers []v1.Layer
	Config v1.Config
}

// Build assembles the image of s, created at epoch, for linux/amd64 or
// whatever GOARCH the binaries in it were built for.
func Build(s Spec, arch string, epoch time.Time) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, s.Layers...)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = arch, "linux"
	cf.Config = s.Config
	cf.Created = v1.Time{Time: epoch}
	// History says which layer is which, for `docker history` readers; its
	// times are the epoch too.
	cf.History = nil
	for range s.Layers {
		cf.History = append(cf.History, v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "fleetd ociimage"})
	}
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes img as an OCI image layout in a tar at path, named
// ref in the index (the io.containerd.image.name annotation, which ctr
// import names the image by, and the tag as org.opencontainers.image.ref.name).
func WriteArchive(path, ref string, img v1.Image) error {
	f, err := os.Create(path + ".partial")
	if err != nil {
		return err
	}
	if err := writeArchive(f, ref, img); err != nil {
		f.Close()
		os.Remove(path + ".partial")
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(path+".partial", path)
}

func writeArchive(w io.Writer, ref string, img v1.Image) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	index := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Size:      int64(len(manifest)),
			Digest:    digest,
			Annotations: map[string]string{
				"io.containerd.image.name":          ref,
				"org.opencontainers.image.ref.name": tag,
			},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	put := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put("index.json", indexJSON); err != nil {
		return err
	}
	if err := put(blobPath(digest), manifest); err != nil {
		return err
	}
	if err := put(blobPath(cfgName), config); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	seen := map[v1.Hash]bool{}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		if seen[d] {
			continue
		}
		seen[d] = true
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: blobPath(d), Mode: 0o644, Size: size, ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			rc.Close()
			return err
		}
		n, err := io.Copy(tw, rc)
		rc.Close()
		if err != nil {
			return err
		}
		if n != size {
			return fmt.Errorf("layer %s: wrote %d bytes, want %d", d, n, size)
		}
	}
	return tw.Close()
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
