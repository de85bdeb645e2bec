package deploy

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tracebed/tracebed/internal/testproc"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./deploy -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what was written (go test ./deploy -update rewrites it; review the diff):\n%s", path, got)
	}
}

func testK8s() *K8s {
	return &K8s{
		Sweep: Sweep{Name: Name("dynaina-sweep"), Specs: []string{"dynaina-sweep", "my/spec.yaml"},
			Experiments: []string{"dynaina-sweep", "mine"}, Shards: 7, Parallel: 2},
		Image: "registry.example.org/tracebed:0123456789ab", MergeWait: 24 * time.Hour, Retries: 2,
		Files: []File{{Path: "my/spec.yaml", Data: []byte("name: mine\n")}, {Path: "my/jobs.csv", Data: []byte("arrival,model\n")}},
	}
}

// decode splits a YAML stream into documents and decodes each, strictly,
// into the k8s.io/api type its kind names.
func decode(t *testing.T, stream []byte) []any {
	t.Helper()
	var objs []any
	for i, doc := range strings.Split(string(stream), "\n---\n")[1:] {
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var obj any
		switch meta.APIVersion + " " + meta.Kind {
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1 PersistentVolumeClaim":
			obj = &corev1.PersistentVolumeClaim{}
		case "batch/v1 Job":
			obj = &batchv1.Job{}
		default:
			t.Fatalf("document %d: unexpected %s %s", i, meta.APIVersion, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("document %d (%s): %v", i, meta.Kind, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

func TestK8sManifestsDecodeIntoAPITypes(t *testing.T) {
	k := testK8s()
	out, err := k.YAML()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "sweep.k8s.yaml", out)
	objs := decode(t, out)
	if len(objs) != 4 {
		t.Fatalf("%d objects, want ConfigMap, PVC and two Jobs", len(objs))
	}
	cm := objs[0].(*corev1.ConfigMap)
	pvc := objs[1].(*corev1.PersistentVolumeClaim)
	shards := objs[2].(*batchv1.Job)
	merge := objs[3].(*batchv1.Job)

	if cm.Name != "tracebed-dynaina-sweep-files" || cm.Data["my_spec.yaml"] != "name: mine\n" || cm.Data["my_jobs.csv"] != "arrival,model\n" {
		t.Errorf("configmap %s: %v", cm.Name, cm.Data)
	}
	if pvc.Name != "tracebed-dynaina-sweep-results" || !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) ||
		pvc.Spec.Resources.Requests.Storage().String() != "1Gi" {
		t.Errorf("pvc %s: %+v", pvc.Name, pvc.Spec)
	}

	s := shards.Spec
	if shards.Name != "tracebed-dynaina-sweep-shards" || s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion ||
		*s.Completions != 7 || *s.Parallelism != 7 || *s.BackoffLimitPerIndex != 2 {
		t.Errorf("shards job %s: %+v", shards.Name, s)
	}
	pod := s.Template.Spec
	c := pod.Containers[0]
	wantArgs := []string{"run", "--quiet", "--shard", "$(JOB_COMPLETION_INDEX)/7", "--parallel", "2", "--out", "/results/shards", "dynaina-sweep", "my/spec.yaml"}
	if c.Image != k.Image || !slices.Equal(c.Command, []string{"tracebed"}) || !slices.Equal(c.Args, wantArgs) || c.WorkingDir != FilesMount {
		t.Errorf("shard container: image %s command %q args %q workdir %q", c.Image, c.Command, c.Args, c.WorkingDir)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "JOB_COMPLETION_INDEX" || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		t.Errorf("shard env %+v", c.Env)
	}
	if c.Resources.Requests.Cpu().String() != "2" || c.Resources.Limits.Memory().String() != "2Gi" {
		t.Errorf("shard resources %+v", c.Resources)
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever || !*pod.SecurityContext.RunAsNonRoot || *pod.SecurityContext.FSGroup != User {
		t.Errorf("pod restart %s security %+v", pod.RestartPolicy, pod.SecurityContext)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	if mounts["results"] != "/results" || vols["results"].PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Errorf("results volume: mounts %v volumes %+v", mounts, vols)
	}
	items := vols["files"].ConfigMap.Items
	if mounts["files"] != FilesMount || vols["files"].ConfigMap.Name != cm.Name || len(items) != 2 ||
		items[0] != (corev1.KeyToPath{Key: "my_jobs.csv", Path: "my/jobs.csv"}) || items[1] != (corev1.KeyToPath{Key: "my_spec.yaml", Path: "my/spec.yaml"}) {
		t.Errorf("files volume: %+v", vols["files"])
	}

	m := merge.Spec
	mc := m.Template.Spec.Containers[0]
	wantMerge := []string{"merge", "--wait", "24h0m0s", "--expect", "dynaina-sweep", "--expect", "mine", "--out", "/results", "/results/shards"}
	if merge.Name != "tracebed-dynaina-sweep-merge" || m.CompletionMode != nil || *m.Completions != 1 || !slices.Equal(mc.Args, wantMerge) || mc.Image != k.Image {
		t.Errorf("merge job %s: completions %v args %q", merge.Name, m.Completions, mc.Args)
	}
	for _, j := range []*batchv1.Job{shards, merge} {
		if j.Labels["app.kubernetes.io/instance"] != k.Name || j.Spec.Template.Labels["app.kubernetes.io/name"] != "tracebed" {
			t.Errorf("job %s labels %v, pod labels %v", j.Name, j.Labels, j.Spec.Template.Labels)
		}
	}
}

func TestK8sExistingClaimAndNoFiles(t *testing.T) {
	k := testK8s()
	k.Files, k.Claim, k.Parallelism, k.Namespace = nil, "shared", 3, "lab"
	objs, err := k.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 {
		t.Fatalf("%d objects, want the two Jobs", len(objs))
	}
	j := objs[0].(*batchv1.Job)
	if *j.Spec.Parallelism != 3 || j.Namespace != "lab" || j.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "shared" ||
		len(j.Spec.Template.Spec.Volumes) != 1 || j.Spec.Template.Spec.Containers[0].WorkingDir != "" {
		t.Errorf("%+v", j.Spec)
	}
}

func TestK8sBinaryFile(t *testing.T) {
	k := testK8s()
	k.Files = []File{{Path: "t.memtrace", Data: []byte{0xff, 0x00, 0x80}}, {Path: "t_memtrace", Data: []byte("x")}}
	out, err := k.YAML()
	if err != nil {
		t.Fatal(err)
	}
	cm := decode(t, out)[0].(*corev1.ConfigMap)
	if !bytes.Equal(cm.BinaryData["t.memtrace"], []byte{0xff, 0x00, 0x80}) || cm.Data["t_memtrace"] != "x" {
		t.Errorf("data %q, binary data %q", cm.Data, cm.BinaryData)
	}
}

func TestK8sErrors(t *testing.T) {
	tests := []struct {
		name   string
		change func(*K8s)
		want   string
	}{
		{"bad name", func(k *K8s) { k.Name = "Sweep_1" }, `name "Sweep_1"`},
		{"long name", func(k *K8s) { k.Name = strings.Repeat("a", 41) }, "at most 40"},
		{"no shards", func(k *K8s) { k.Shards = 0 }, "0 shards"},
		{"no image", func(k *K8s) { k.Image = "" }, "no image"},
		{"pull policy", func(k *K8s) { k.ImagePullPolicy = "Sometimes" }, `pull policy "Sometimes"`},
		{"memory", func(k *K8s) { k.Memory = "lots" }, `memory "lots"`},
		{"escaping file", func(k *K8s) { k.Files = []File{{Path: "../spec.yaml"}} }, "../spec.yaml: only files under the working directory"},
		{"absolute file", func(k *K8s) { k.Files = []File{{Path: "/etc/spec.yaml"}} }, "/etc/spec.yaml: only files"},
		{"too big", func(k *K8s) { k.Files = []File{{Path: "big.csv", Data: make([]byte, 2<<20)}} }, "ConfigMap holds about 1 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := testK8s()
			tt.change(k)
			_, err := k.YAML()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestName(t *testing.T) {
	for in, want := range map[string]string{
		"dynaina-sweep":         "tracebed-dynaina-sweep",
		"My_Exp.v2":             "tracebed-my-exp-v2",
		"sweep":                 "tracebed-sweep",
		strings.Repeat("x", 60): "tracebed-" + strings.Repeat("x", 31),
	} {
		if got := Name(in); got != want || len(got) > MaxNameLen {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSlurmScript(t *testing.T) {
	s := &Slurm{
		Sweep:    Sweep{Name: Name("dynaina-sweep"), Specs: []string{"dynaina-sweep", "my spec.yaml"}, Experiments: []string{"dynaina-sweep"}, Shards: 7, Parallel: 2},
		Tracebed: "apptainer exec tracebed.sif tracebed", Time: 90 * time.Minute, Memory: "4G", Partition: "cpu", Concurrent: 3,
	}
	out, err := s.Script()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "sweep.sbatch", out)
	for _, want := range []string{
		"#SBATCH --array=0-6%3\n", "#SBATCH --cpus-per-task=2\n", "#SBATCH --time=0-01:30:00\n", "#SBATCH --mem=4G\n",
		"#SBATCH --partition=cpu\n", `--shard "${SLURM_ARRAY_TASK_ID}/7"`, `--dependency=afterok:"$array"`,
		"TRACEBED=(apptainer exec tracebed.sif tracebed)\n", "SPECS=(dynaina-sweep 'my spec.yaml')\n",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("the script lacks %q", want)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to check the script's syntax")
	}
	path := filepath.Join(t.TempDir(), "sweep.sbatch")
	if err := os.WriteFile(path, out, 0o755); err != nil {
		t.Fatal(err)
	}
	if msg, err := testproc.Command(t, bash, "-n", path).CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v\n%s", err, msg)
	}
}

func TestSlurmTime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		90 * time.Minute:                     "0-01:30:00",
		49*time.Hour + 1500*time.Millisecond: "2-01:00:02",
		time.Second:                          "0-00:00:01",
	} {
		if got := slurmTime(d); got != want {
			t.Errorf("slurmTime(%v) = %s, want %s", d, got, want)
		}
	}
}

// readTar returns the regular files and directories of a tar by name.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, hdrs := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, hdrs
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := hdrs[h.Name]; dup {
			t.Errorf("%s is in the tar twice", h.Name)
		}
		hdrs[h.Name] = h
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}

func ExampleName() {
	fmt.Println(Name("dynaina-sweep"))
	// Output: tracebed-dynaina-sweep
}
