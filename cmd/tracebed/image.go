package main

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/deploy"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/topologies"
)

func (a *app) imageCommand() *cobra.Command {
	var (
		out    string
		binary string
		tags   []string
	)
	cmd := &cobra.Command{
		Use:   "image [flags]",
		Short: "Build an OCI image of tracebed, without Docker",
		Long: `Write an OCI image of tracebed as one tar: a static Linux tracebed
binary as the entrypoint, the ready specs, topologies and traces under
` + deploy.DataDir + ` (the working directory), no base image. The tar is both
an OCI image layout and a docker save archive: load it with
'docker load -i', 'podman load -i' or 'ctr image import', or push it with
'crane push' or 'skopeo copy'. It is tagged tracebed:COMMIT.

The binary is this tracebed unless --binary names another (built from the
same commit, for another architecture say); it must be a static Linux
executable, as 'make build' makes on Linux. 'make image' builds one for
Linux from any machine and runs this command. The
same binary and commit give the same image, byte for byte (file times are
SOURCE_DATE_EPOCH, else the commit's time).`,
		Example: "  make image                       # bin/tracebed.tar from a static build\n  tracebed image --binary bin/linux-amd64/tracebed --out tracebed.tar\n  docker load -i tracebed.tar && docker run --rm tracebed:COMMIT version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if binary == "" {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				binary = exe
			}
			data, err := os.ReadFile(binary)
			if err != nil {
				return badInput(err)
			}
			arch, err := staticLinuxArch(binary)
			if err != nil {
				return badInput(err)
			}
			commit, created := binaryStamp(binary)
			if own := buildCommit(); own != "" && commit != "" && own != commit {
				return badInput(fmt.Errorf("%s was built from commit %s, this tracebed from %s: the image's specs, topologies and traces come from this tracebed, so use a binary of the same commit", binary, commit, own))
			}
			if commit == "" {
				commit = buildCommit()
			}
			refs, err := imageTags(tags, commit)
			if err != nil {
				return badInput(err)
			}
			if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
				sec, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return badInput(fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s))
				}
				created = time.Unix(sec, 0)
			}
			files, err := a.dataFiles()
			if err != nil {
				return err
			}
			im := deploy.Image{Binary: data, Arch: arch, Files: files, Version: version, Commit: commit, Created: created}
			img, err := im.Build()
			if err != nil {
				return err
			}
			if err := writeAtomic(out, func(f *os.File) error { return deploy.WriteArchive(f, img, refs, created) }); err != nil {
				return err
			}
			digest, err := img.Digest()
			if err != nil {
				return err
			}
			fi, err := os.Stat(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s: %s (linux/%s, %d files, %.1f MB, manifest %s)\n", out, refs[0], arch, len(files)+1, float64(fi.Size())/1e6, digest)
			fmt.Fprintf(a.stderr, "load it with docker load -i %[1]s, podman load -i %[1]s or ctr image import %[1]s\n", out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "out", "o", "tracebed.tar", "the image archive to write")
	f.StringVar(&binary, "binary", "", "the static Linux tracebed binary to put in the image (default: this one)")
	f.StringSliceVar(&tags, "tag", nil, "image name, repeatable (default: tracebed); a name without a tag gets :COMMIT")
	return cmd
}

// staticLinuxArch checks that path is a statically linked Linux
// executable and returns its GOARCH.
func staticLinuxArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s is not a Linux executable (%v); build one for the image with: CGO_ENABLED=0 GOOS=linux go build -o tracebed-linux ./cmd/tracebed, then give --binary tracebed-linux (make image does both)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked, and the image has no C library: build a static one with CGO_ENABLED=0 (make image does) and give it with --binary", path)
		}
	}
	arch := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386", elf.EM_ARM: "arm",
		elf.EM_RISCV: "riscv64", elf.EM_S390: "s390x", elf.EM_PPC64: "ppc64le", elf.EM_LOONGARCH: "loong64"}[f.Machine]
	if arch == "" {
		return "", fmt.Errorf("%s is for %v, which tracebed images do not cover", path, f.Machine)
	}
	return arch, nil
}

// binaryStamp reads a Go binary's commit (from -X main.commit=…, as the
// Makefile sets it, else the VCS revision) and commit time ("" and the
// Unix epoch when it does not say).
func binaryStamp(path string) (commit string, at time.Time) {
	at = time.Unix(0, 0)
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", at
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "-ldflags":
			for _, fl := range strings.Fields(s.Value) {
				if c, ok := strings.CutPrefix(fl, "main.commit="); ok && c != "" {
					commit = c
				}
			}
		case "vcs.revision":
			if commit == "" && len(s.Value) >= 12 {
				commit = s.Value[:12]
			}
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				at = t
			}
		}
	}
	return commit, at
}

// imageTags parses the --tag values; a name without a tag gets the commit.
func imageTags(tags []string, commit string) ([]name.Tag, error) {
	if len(tags) == 0 {
		tags = []string{"tracebed"}
	}
	var out []name.Tag
	for _, t := range tags {
		if i := strings.LastIndex(t, ":"); i < 0 || strings.Contains(t[i:], "/") {
			if commit == "" {
				return nil, fmt.Errorf("--tag %s: the binary does not say which commit it was built from; give a tag, e.g. %s:v1", t, t)
			}
			t += ":" + commit
		}
		ref, err := name.NewTag(t)
		if err != nil {
			return nil, fmt.Errorf("--tag: %v", err)
		}
		out = append(out, ref)
	}
	return out, nil
}

// dataFiles are the ready specs, topologies and traces built into this
// tracebed, at their repository paths.
func (a *app) dataFiles() ([]deploy.File, error) {
	var files []deploy.File
	for _, n := range experiments.ReadyFiles() {
		d, err := experiments.ReadyFile(n)
		if err != nil {
			return nil, err
		}
		files = append(files, deploy.File{Path: path.Join("experiments", n), Data: d})
	}
	for _, n := range topologies.ReadyFiles() {
		d, err := topologies.ReadyFile(n)
		if err != nil {
			return nil, err
		}
		files = append(files, deploy.File{Path: path.Join("topologies", n), Data: d})
	}
	for _, e := range a.embedded {
		err := fs.WalkDir(e.fsys, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := fs.ReadFile(e.fsys, p)
			if err != nil {
				return err
			}
			files = append(files, deploy.File{Path: path.Join(e.prefix, p), Data: data})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// writeAtomic writes a file through write, renaming it into place only
// when write succeeds.
func writeAtomic(path string, write func(*os.File) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	err = write(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return errors.Join(fmt.Errorf("writing %s", path), err)
	}
	return nil
}
