package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

var testCreated = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testImage() *Image {
	return &Image{
		Binary: []byte("\x7fELF not really a program"), Arch: "arm64",
		Files: []File{
			{Path: "experiments/incast.yaml", Data: []byte("name: incast\n")},
			{Path: "traces/jobs/sample.csv", Data: []byte("arrival,model\n")},
		},
		Version: "0.1.0-dev", Commit: "0123456789ab", Created: testCreated,
	}
}

func archive(t *testing.T, im *Image, tags ...string) []byte {
	t.Helper()
	img, err := im.Build()
	if err != nil {
		t.Fatal(err)
	}
	var refs []name.Tag
	for _, s := range tags {
		r, err := name.NewTag(s)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	var b bytes.Buffer
	if err := WriteArchive(&b, img, refs, testCreated); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestImageArchive checks the archive as the three loaders read it: the
// OCI layout (index.json → manifest → config and layer blobs), the docker
// save manifest.json naming the same blobs, every blob's digest and size,
// the config, and the layer's files.
func TestImageArchive(t *testing.T) {
	im := testImage()
	tarData := archive(t, im, "tracebed:0123456789ab", "registry.example.org/lab/tracebed:v1")
	if again := archive(t, im, "tracebed:0123456789ab", "registry.example.org/lab/tracebed:v1"); !bytes.Equal(tarData, again) {
		t.Error("two builds of the same image differ")
	}
	files, _ := readTar(t, bytes.NewReader(tarData))
	for p, data := range files {
		if hexDigest, ok := strings.CutPrefix(p, "blobs/sha256/"); ok && hexDigest != "" && sha(data) != hexDigest {
			t.Errorf("blob %s holds data of digest %s", p, sha(data))
		}
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout: %s", files["oci-layout"])
	}

	var idx v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != types.OCIImageIndex || len(idx.Manifests) != 2 {
		t.Fatalf("index.json: %s", files["index.json"])
	}
	names := []string{idx.Manifests[0].Annotations["io.containerd.image.name"], idx.Manifests[1].Annotations["io.containerd.image.name"]}
	refNames := []string{idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"], idx.Manifests[1].Annotations["org.opencontainers.image.ref.name"]}
	if !slices.Equal(names, []string{"docker.io/library/tracebed:0123456789ab", "registry.example.org/lab/tracebed:v1"}) || !slices.Equal(refNames, []string{"0123456789ab", "v1"}) {
		t.Errorf("index annotations: %q %q", names, refNames)
	}
	desc := idx.Manifests[0]
	rawManifest := files["blobs/sha256/"+desc.Digest.Hex]
	if desc.MediaType != types.OCIManifestSchema1 || desc.Size != int64(len(rawManifest)) || idx.Manifests[1].Digest != desc.Digest {
		t.Errorf("index descriptor %+v, manifest blob of %d bytes", desc, len(rawManifest))
	}
	m, err := v1.ParseManifest(bytes.NewReader(rawManifest))
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Fatalf("manifest: %s", rawManifest)
	}
	rawConfig := files["blobs/sha256/"+m.Config.Digest.Hex]
	layerGz := files["blobs/sha256/"+m.Layers[0].Digest.Hex]
	if int64(len(rawConfig)) != m.Config.Size || int64(len(layerGz)) != m.Layers[0].Size {
		t.Errorf("sizes: config %d (manifest says %d), layer %d (manifest says %d)", len(rawConfig), m.Config.Size, len(layerGz), m.Layers[0].Size)
	}

	var save tarball.Manifest
	if err := json.Unmarshal(files["manifest.json"], &save); err != nil {
		t.Fatal(err)
	}
	if len(save) != 1 || save[0].Config != "blobs/sha256/"+m.Config.Digest.Hex || !slices.Equal(save[0].Layers, []string{"blobs/sha256/" + m.Layers[0].Digest.Hex}) ||
		!slices.Equal(save[0].RepoTags, []string{"tracebed:0123456789ab", "registry.example.org/lab/tracebed:v1"}) {
		t.Errorf("manifest.json: %s", files["manifest.json"])
	}

	cf, err := v1.ParseConfigFile(bytes.NewReader(rawConfig))
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != "arm64" || !cf.Created.Time.Equal(testCreated) ||
		!slices.Equal(c.Entrypoint, []string{BinaryPath}) || c.WorkingDir != DataDir || c.User != "65532:65532" ||
		c.Labels["org.opencontainers.image.revision"] != "0123456789ab" || c.Labels["org.opencontainers.image.version"] != "0.1.0-dev" {
		t.Errorf("config: %s", rawConfig)
	}
	zr, err := gzip.NewReader(bytes.NewReader(layerGz))
	if err != nil {
		t.Fatal(err)
	}
	layerTar, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.RootFS.DiffIDs) != 1 || cf.RootFS.DiffIDs[0].Hex != sha(layerTar) {
		t.Errorf("diff_ids %v, layer's uncompressed digest %s", cf.RootFS.DiffIDs, sha(layerTar))
	}
	lf, lh := readTar(t, bytes.NewReader(layerTar))
	wantNames := []string{"tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/tracebed", "usr/share/", "usr/share/tracebed/",
		"usr/share/tracebed/experiments/", "usr/share/tracebed/experiments/incast.yaml", "usr/share/tracebed/results/",
		"usr/share/tracebed/traces/", "usr/share/tracebed/traces/jobs/", "usr/share/tracebed/traces/jobs/sample.csv"}
	var gotNames []string
	for n, h := range lh {
		gotNames = append(gotNames, n)
		if !h.ModTime.Equal(testCreated) || h.Uname != "" {
			t.Errorf("%s: mtime %v, user %q", n, h.ModTime, h.Uname)
		}
	}
	slices.Sort(gotNames)
	if !slices.Equal(gotNames, wantNames) {
		t.Errorf("layer files %q, want %q", gotNames, wantNames)
	}
	if h := lh["usr/local/bin/tracebed"]; h.Mode != 0o755 || !bytes.Equal(lf["usr/local/bin/tracebed"], im.Binary) {
		t.Errorf("binary: mode %o, %d bytes", h.Mode, len(lf["usr/local/bin/tracebed"]))
	}
	if string(lf["usr/share/tracebed/experiments/incast.yaml"]) != "name: incast\n" {
		t.Errorf("spec: %q", lf["usr/share/tracebed/experiments/incast.yaml"])
	}
	if h := lh["usr/share/tracebed/results/"]; h.Uid != User || h.Gid != User || h.Typeflag != tar.TypeDir {
		t.Errorf("results/: %+v", h)
	}
	if h := lh["tmp/"]; h.Mode != 0o1777 {
		t.Errorf("tmp/: mode %o", h.Mode)
	}
}

// TestImageLoadsWithGoContainerregistry reads the archive back both ways
// go-containerregistry can — as a docker save tarball and as an OCI layout
// — and validates each image (digests, sizes, diff IDs).
func TestImageLoadsWithGoContainerregistry(t *testing.T) {
	tarData := archive(t, testImage(), "tracebed:0123456789ab")
	tag, _ := name.NewTag("tracebed:0123456789ab")
	fromSave, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarData)), nil }, &tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(fromSave); err != nil {
		t.Errorf("as a docker save archive: %v", err)
	}
	dir := t.TempDir()
	files, hdrs := readTar(t, bytes.NewReader(tarData))
	for n, data := range files {
		p := filepath.Join(dir, n)
		if hdrs[n].Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	fromLayout, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(fromLayout); err != nil {
		t.Errorf("as an OCI layout: %v", err)
	}
	c1, _ := fromSave.ConfigName()
	c2, _ := fromLayout.ConfigName()
	if c1 != c2 {
		t.Errorf("the two views have different configs: %v and %v", c1, c2)
	}
}

func TestImageErrors(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Image)
		want   string
	}{
		{"no binary", func(im *Image) { im.Binary = nil }, "no binary"},
		{"no arch", func(im *Image) { im.Arch = "" }, "no architecture"},
		{"escaping path", func(im *Image) { im.Files = append(im.Files, File{Path: "../../etc/passwd"}) }, "only files under"},
		{"twice", func(im *Image) { im.Files = append(im.Files, im.Files[0]) }, "in the image twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			im := testImage()
			tt.change(im)
			_, err := im.Build()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	img, err := testImage().Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(io.Discard, img, nil, testCreated); err == nil {
		t.Error("an archive without a tag was written")
	}
}
