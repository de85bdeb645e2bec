package deploy

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths inside the image.
const (
	BinaryPath = "/usr/local/bin/tracebed"
	// DataDir holds the ready specs, topologies and traces at their
	// repository paths (experiments/…, topologies/…, traces/…); it is the
	// working directory, so "tracebed run experiments/incast.yaml" finds
	// the file and records the same spec path as a run of the source tree.
	DataDir = "/usr/share/tracebed"
)

// Image describes an image of tracebed: one layer, no base image.
type Image struct {
	// Binary is a static Linux executable of tracebed for Arch (amd64,
	// arm64, …: GOARCH names, as OCI uses them).
	Binary []byte
	Arch   string
	// Files go under DataDir at their paths.
	Files []File
	// Version and Commit label the image (org.opencontainers.image.*).
	Version, Commit string
	// Created stamps the image, its layer's files and its history; the
	// same inputs and Created give the same image digest.
	Created time.Time
}

// Build makes the image: the binary at BinaryPath as the entrypoint, Files
// under DataDir (the working directory, with a results/ the image's user
// may write to), /tmp, run as user 65532. Manifest and config have OCI
// media types; the layer is a gzip-compressed tar.
func (im *Image) Build() (v1.Image, error) {
	if len(im.Binary) == 0 {
		return nil, fmt.Errorf("no binary")
	}
	if im.Arch == "" {
		return nil, fmt.Errorf("no architecture")
	}
	layerTar, err := im.layer()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: im.Created.UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   created,
			CreatedBy: "tracebed image",
			Comment:   "static tracebed binary, ready specs, topologies and traces",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = im.Arch, "linux", created
	cf.Config = v1.Config{
		Entrypoint: []string{BinaryPath},
		Cmd:        []string{"--help"},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"},
		WorkingDir: DataDir,
		User:       fmt.Sprintf("%d:%d", User, User),
		Labels: map[string]string{
			"org.opencontainers.image.title":       "tracebed",
			"org.opencontainers.image.description": "trace-driven emulation testbed for switch resources shared by many tenants",
			"org.opencontainers.image.version":     im.Version,
			"org.opencontainers.image.revision":    im.Commit,
			"org.opencontainers.image.created":     created.Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

// layer is the uncompressed tar of the image's one layer, its entries in
// order, every one stamped with Created.
func (im *Image) layer() ([]byte, error) {
	type entry struct {
		hdr  tar.Header
		data []byte
	}
	entries := map[string]*entry{}
	dir := func(p string, mode int64, owner int) {
		for ; p != "/" && p != "."; p = path.Dir(p) {
			if entries[p] == nil {
				entries[p] = &entry{hdr: tar.Header{Typeflag: tar.TypeDir, Mode: 0o755}}
			}
			if mode != 0 {
				entries[p].hdr.Mode, entries[p].hdr.Uid, entries[p].hdr.Gid = mode, owner, owner
				mode = 0
			}
		}
	}
	file := func(p string, mode int64, data []byte) error {
		if entries[p] != nil {
			return fmt.Errorf("%s is in the image twice", p)
		}
		dir(path.Dir(p), 0, 0)
		entries[p] = &entry{hdr: tar.Header{Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data))}, data: data}
		return nil
	}
	if err := file(BinaryPath, 0o755, im.Binary); err != nil {
		return nil, err
	}
	for _, f := range im.Files {
		rel, err := relPath(f.Path)
		if err != nil {
			return nil, err
		}
		if err := file(path.Join(DataDir, rel), 0o644, f.Data); err != nil {
			return nil, err
		}
	}
	dir(DataDir+"/results", 0o755, User)
	dir("/tmp", 0o1777, 0)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, p := range slices.Sorted(maps.Keys(entries)) {
		e := entries[p]
		h := e.hdr
		h.Name = strings.TrimPrefix(p, "/")
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		h.ModTime = im.Created.UTC()
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteArchive writes img, tagged with tags, as one tar that is both an OCI
// image layout (oci-layout, index.json, blobs/sha256/…: what podman load,
// ctr import and Docker 25 read) and a docker save archive (manifest.json,
// naming the same blobs: what older Docker reads) — the form docker save
// itself writes since Docker 25.
func WriteArchive(w io.Writer, img v1.Image, tags []name.Tag, stamp time.Time) error {
	if len(tags) == 0 {
		return fmt.Errorf("no tag")
	}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	save := tarball.Descriptor{Config: blob(cfgName)}
	for _, t := range tags {
		idx.Manifests = append(idx.Manifests, v1.Descriptor{
			MediaType: mt, Size: int64(len(rawManifest)), Digest: digest,
			Annotations: map[string]string{
				// containerd (ctr import, Docker 25) names the image
				// by this; the OCI spec's own is the tag alone.
				"io.containerd.image.name":          FullName(t),
				"org.opencontainers.image.ref.name": t.TagStr(),
			},
		})
		save.RepoTags = append(save.RepoTags, t.String())
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		save.Layers = append(save.Layers, blob(d))
	}
	index, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(tarball.Manifest{save})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	put := func(name string, size int64, r io.Reader) error {
		hdr := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: stamp.UTC(), Format: tar.FormatPAX}
		if strings.HasSuffix(name, "/") {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := put(d, 0, bytes.NewReader(nil)); err != nil {
			return err
		}
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		err = put(blob(d), size, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{blob(cfgName), rawConfig},
		{blob(digest), rawManifest},
		{"index.json", index},
		{"manifest.json", manifest},
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
	} {
		if err := put(f.name, int64(len(f.data)), bytes.NewReader(f.data)); err != nil {
			return err
		}
	}
	return tw.Close()
}

// FullName is a tag's fully qualified name as containerd writes it
// (docker.io/library/tracebed:TAG for tracebed:TAG).
func FullName(t name.Tag) string {
	reg := t.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + t.RepositoryStr() + ":" + t.TagStr()
}
