package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tracebed/tracebed/deploy"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/testproc"
)

// podCommand turns a Job's container into the command a pod of index i
// runs: $(VAR) expanded from the container's env (JOB_COMPLETION_INDEX is
// i, as the Job controller sets it), the volume mounts mapped to
// directories under root, run as this test binary in the container's
// working directory.
func podCommand(t *testing.T, c corev1.Container, i int, root string) *exec.Cmd {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if e.Name == "JOB_COMPLETION_INDEX" {
			env[e.Name] = strconv.Itoa(i)
		}
	}
	mapPath := func(s string) string {
		for _, m := range c.VolumeMounts {
			if s == m.MountPath || strings.HasPrefix(s, m.MountPath+"/") {
				return filepath.Join(root, s)
			}
		}
		return s
	}
	if c.Command[0] != "tracebed" {
		t.Fatalf("command %q", c.Command)
	}
	var args []string
	for _, a := range c.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if strings.Contains(a, "$(") {
			t.Fatalf("argument %q refers to a variable the pod does not set", a)
		}
		args = append(args, mapPath(a))
	}
	cmd := self(t, args...)
	if c.WorkingDir != "" {
		cmd.Dir = mapPath(c.WorkingDir)
	}
	return cmd
}

// TestExportK8sManifestsRun exports a sweep of a spec file for Kubernetes,
// decodes the objects into k8s.io/api types, lays out the ConfigMap's
// files as its volume would, runs each pod's command as the Indexed Job
// would (index 0…N-1), then the merge Job's, and checks the merged
// results.json is the unsharded run's.
func TestExportK8sManifestsRun(t *testing.T) {
	code, stdout, stderr := run(t, "export", "k8s", smallSweep, "--shards", "3", "--image", "registry.example.org/tracebed:test", "--parallel", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "small-sweep: 24 runs in 3 shards") {
		t.Errorf("stderr: %s", stderr)
	}
	var cm *corev1.ConfigMap
	var jobs []*batchv1.Job
	for _, doc := range strings.Split(stdout, "\n---\n")[1:] {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ConfigMap":
			cm = &corev1.ConfigMap{}
			if err := yaml.UnmarshalStrict([]byte(doc), cm); err != nil {
				t.Fatal(err)
			}
		case "Job":
			j := &batchv1.Job{}
			if err := yaml.UnmarshalStrict([]byte(doc), j); err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, j)
		case "PersistentVolumeClaim":
		default:
			t.Fatalf("unexpected %s", meta.Kind)
		}
	}
	if cm == nil || len(jobs) != 2 {
		t.Fatalf("configmap %v, %d jobs", cm, len(jobs))
	}
	shards, merge := jobs[0], jobs[1]
	if *shards.Spec.CompletionMode != batchv1.IndexedCompletion || *shards.Spec.Completions != 3 {
		t.Fatalf("shards job spec %+v", shards.Spec)
	}
	root := t.TempDir()
	for _, v := range shards.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		for _, it := range v.ConfigMap.Items {
			p := filepath.Join(root, deploy.FilesMount, it.Path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(cm.Data[it.Key]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range int(*shards.Spec.Completions) {
		if out, err := podCommand(t, shards.Spec.Template.Spec.Containers[0], i, root).CombinedOutput(); err != nil {
			t.Fatalf("pod %d: %v\n%s", i, err, out)
		}
	}
	if out, err := podCommand(t, merge.Spec.Template.Spec.Containers[0], 0, root).CombinedOutput(); err != nil {
		t.Fatalf("merge pod: %v\n%s", err, out)
	}
	sameResults(t, unsharded(t, smallSweep), filepath.Join(root, deploy.ResultsMount, "small-sweep"))
}

// TestExportSlurmScriptRuns runs the exported batch script with bash, with
// an sbatch on PATH that runs each array task in turn (SLURM_ARRAY_TASK_ID
// 0…N-1) and then the merge, refusing it unless it depends on the array
// (afterok), and checks the merged results.json is the unsharded run's.
func TestExportSlurmScriptRuns(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("skipping: no bash to run the batch script")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	code, script, stderr := run(t, "export", "slurm", smallSweep, "--shards", "4", "--time", "1h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(script, "#SBATCH --array=0-3\n") {
		t.Errorf("no array of 4 tasks:\n%s", script)
	}
	bin, work := t.TempDir(), t.TempDir()
	write := func(path, content string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(bin, "tracebed"), "#!/bin/sh\nTRACEBED_TEST_AS_MAIN=1 exec "+strconv.Quote(exe)+" \"$@\"\n", 0o755)
	write(filepath.Join(bin, "sbatch"), `#!/bin/bash
# A stand-in for Slurm's sbatch: array jobs run task by task, at once;
# a --wrap job runs once the array it depends on (afterok) has.
set -euo pipefail
echo "sbatch $*" >> sbatch.log
dep= wrap= file=
for a in "$@"; do
	case $a in
	--dependency=*) dep=${a#--dependency=} ;;
	--wrap=*) wrap=${a#--wrap=} ;;
	--*) ;;
	*) file=$a ;;
	esac
done
if [[ -n $file ]]; then
	range=$(sed -n 's/^#SBATCH --array=\([0-9]*\)-\([0-9]*\)$/\1 \2/p' "$file")
	read -r lo hi <<< "$range"
	for ((i = lo; i <= hi; i++)); do
		SLURM_JOB_ID=100 SLURM_ARRAY_TASK_ID=$i SLURM_CPUS_PER_TASK=1 bash "$file" >> "task-$i.out" 2>&1
	done
	echo "100;testcluster"
	exit 0
fi
[[ $dep == afterok:100 ]] || { echo "merge does not wait for the array: dependency $dep" >&2; exit 1; }
SLURM_JOB_ID=101 bash -c "$wrap" > merge.out 2>&1
echo 101
`, 0o755)
	data, err := os.ReadFile(smallSweep)
	if err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(work, smallSweep), string(data), 0o644)
	write(filepath.Join(work, "sweep.sbatch"), script, 0o755)
	cmd := testproc.Command(t, bash, "sweep.sbatch")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Env = slices.DeleteFunc(cmd.Env, func(e string) bool { return strings.HasPrefix(e, "SLURM_") })
	out, err := cmd.CombinedOutput()
	if err != nil {
		logs, _ := os.ReadFile(filepath.Join(work, "merge.out"))
		t.Fatalf("bash sweep.sbatch: %v\n%s\nmerge: %s", err, out, logs)
	}
	if !strings.Contains(string(out), "submitted the shards as job 100 (4 tasks) and the merge as job 101") {
		t.Errorf("output: %s", out)
	}
	sameResults(t, unsharded(t, smallSweep), filepath.Join(work, "results", "small-sweep"))
}

func TestExportErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"export", "k8s", "incast", "--shards", "2"}, "--image"},
		{[]string{"export", "k8s", "incast", "--image", "x"}, "--shards 0"},
		{[]string{"export", "slurm", "incast", "--shards", "7"}, "at most 6 runs"},
		{[]string{"export", "slurm", "testdata/bad-spec.yaml", "--shards", "2"}, "testdata/bad-spec.yaml:3:32"},
		{[]string{"export", "k8s", "incast", "--shards", "2", "--image", "x", "--name", "Bad_Name"}, `name "Bad_Name"`},
		{[]string{"export", "k8s", "incast", "--shards", "2", "--image", "x", "--pull", "Sometimes"}, `pull policy "Sometimes"`},
	}
	for _, tt := range tests {
		code, _, stderr := run(t, tt.args...)
		if code != exitBadInput || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, want %d and %q: %s", tt.args, code, exitBadInput, tt.want, stderr)
		}
	}
}

// goTool finds the go command, to build static binaries for the images.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Skip("skipping: no go command to build a static binary for the image")
	}
	return p
}

// TestImageCommand builds an image around a small static program and
// checks what tracebed puts in it: the tag from --tag, the binary, and
// every ready spec, topology and trace at its repository path.
func TestImageCommand(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("skipping: images hold Linux binaries; this test builds one for this machine")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"hello\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hello := filepath.Join(dir, "hello")
	build := testproc.Command(t, goTool(t), "build", "-o", hello, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Without a commit the binary cannot name its tag.
	out := filepath.Join(dir, "img.tar")
	if code, _, stderr := run(t, "image", "--binary", hello, "--out", out); code != exitBadInput || !strings.Contains(stderr, "give a tag") {
		t.Errorf("untagged: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := run(t, "image", "--binary", hello, "--tag", "lab/tracebed:test", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "lab/tracebed:test (linux/"+runtime.GOARCH) {
		t.Errorf("stdout: %s", stdout)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := tarFiles(t, f)
	var m tarball.Manifest
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil || len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{"lab/tracebed:test"}) {
		t.Fatalf("manifest.json %s: %v", files["manifest.json"], err)
	}
	if _, ok := files["index.json"]; !ok {
		t.Error("no index.json")
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers: %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	inImage := tarFiles(t, rc)
	want, err := os.ReadFile(hello)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(inImage["usr/local/bin/tracebed"], want) {
		t.Error("the image's binary is not the one given")
	}
	for _, n := range experiments.ReadyFiles() {
		d, _ := experiments.ReadyFile(n)
		if !bytes.Equal(inImage["usr/share/tracebed/experiments/"+n], d) {
			t.Errorf("experiments/%s is missing or differs", n)
		}
	}
	for _, p := range []string{"topologies/leafspine.yaml", "traces/jobs/tiresias-60job.csv", "traces/mem/samples/two-pass.memtxt"} {
		if len(inImage["usr/share/tracebed/"+p]) == 0 {
			t.Errorf("%s is not in the image", p)
		}
	}
	// A program that is not a static Linux executable is refused.
	if code, _, stderr := run(t, "image", "--binary", smallSweep, "--tag", "x:y", "--out", filepath.Join(dir, "x.tar")); code != exitBadInput || !strings.Contains(stderr, "not a Linux executable") {
		t.Errorf("a spec as the binary: exit %d: %s", code, stderr)
	}
}

// tarFiles reads a tar's entries by name.
func tarFiles(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// TestImageRunsInDocker loads a real tracebed image into Docker and runs
// 'tracebed version' in it, where a Docker engine is at hand.
func TestImageRunsInDocker(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("skipping: no Docker engine here (no docker command); TestImageCommand and the deploy tests check the archive's manifest, config and layers instead")
	}
	if out, err := testproc.Command(t, docker, "info").CombinedOutput(); err != nil {
		t.Skipf("skipping: no Docker engine answers (docker info: %v: %.200s)", err, out)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "tracebed")
	build := testproc.Command(t, goTool(t), "build", "-ldflags", "-X main.commit=dockertest01", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tarPath := filepath.Join(dir, "tracebed.tar")
	if code, _, stderr := run(t, "image", "--binary", bin, "--tag", "tracebed:dockertest01", "--out", tarPath); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if out, err := testproc.Command(t, docker, "load", "-i", tarPath).CombinedOutput(); err != nil {
		t.Fatalf("docker load: %v\n%s", err, out)
	}
	defer testproc.Command(t, docker, "image", "rm", "tracebed:dockertest01").Run()
	out, err := testproc.Command(t, docker, "run", "--rm", "tracebed:dockertest01", "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "tracebed 0.") || !strings.Contains(string(out), "dockertest01") {
		t.Fatalf("docker run … version: %v\n%s", err, out)
	}
}
