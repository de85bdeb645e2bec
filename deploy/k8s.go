package deploy

import (
	"bytes"
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tracebed/tracebed/analysis"
)

// K8s is a sweep as Kubernetes objects.
type K8s struct {
	Sweep
	Image string
	// ImagePullPolicy is Always, IfNotPresent (also for "") or Never.
	ImagePullPolicy string
	Namespace       string // "": the namespace kubectl applies to
	// Claim is an existing ReadWriteMany PersistentVolumeClaim for the
	// results; "" creates NAME-results of Storage bytes (StorageClass
	// "" : the cluster's default).
	Claim        string
	Storage      string
	StorageClass string
	// Memory is each shard's memory request and limit (e.g. 2Gi); each
	// shard requests Parallel CPUs.
	Memory string
	// Parallelism is how many shards may run at once (0: all).
	Parallelism int
	// Retries is each shard's retries before the Job marks it failed
	// (backoffLimitPerIndex).
	Retries int
	// MergeWait is how long the merge Job waits for the shards.
	MergeWait time.Duration
	// Files are shipped in a ConfigMap mounted as the pods' working
	// directory: specs and the files they name that the image lacks.
	Files []File
}

// Paths inside the pods.
const (
	ResultsMount = "/results"
	ShardsDir    = ResultsMount + "/shards"
	FilesMount   = "/work"
)

// User is the unprivileged user the image runs as, and the group that owns
// the results volume.
const User = 65532

// Objects returns the sweep's objects in the order to apply them: the
// ConfigMap of Files (if any), the results claim (unless Claim names one),
// the Indexed Job of the shards and the merge Job.
func (k *K8s) Objects() ([]any, error) {
	if err := k.Sweep.check(); err != nil {
		return nil, err
	}
	if k.Image == "" {
		return nil, fmt.Errorf("no image; give the image the pods run, e.g. registry.example.org/tracebed:COMMIT")
	}
	pull := corev1.PullPolicy(cmp.Or(k.ImagePullPolicy, string(corev1.PullIfNotPresent)))
	if !slices.Contains([]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}, pull) {
		return nil, fmt.Errorf("image pull policy %q: want %s, %s or %s", pull, corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever)
	}
	mem, err := resource.ParseQuantity(cmp.Or(k.Memory, "2Gi"))
	if err != nil {
		return nil, fmt.Errorf("memory %q: %v", k.Memory, err)
	}
	cpu := resource.MustParse(strconv.Itoa(k.parallel()))
	var objs []any
	labels := func(component string) map[string]string {
		return map[string]string{
			"app.kubernetes.io/name":      "tracebed",
			"app.kubernetes.io/instance":  k.Name,
			"app.kubernetes.io/component": component,
		}
	}
	meta := func(name, component string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: k.Namespace, Labels: labels(component)}
	}
	claim := k.Claim
	if claim == "" {
		claim = k.Name + "-results"
		size, err := resource.ParseQuantity(cmp.Or(k.Storage, "1Gi"))
		if err != nil {
			return nil, fmt.Errorf("storage %q: %v", k.Storage, err)
		}
		pvc := &corev1.PersistentVolumeClaim{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
			ObjectMeta: meta(claim, "results"),
			Spec: corev1.PersistentVolumeClaimSpec{
				// Shards on different nodes write at once.
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			},
		}
		if k.StorageClass != "" {
			pvc.Spec.StorageClassName = &k.StorageClass
		}
		objs = append(objs, pvc)
	}
	volumes := []corev1.Volume{{Name: "results", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	mounts := []corev1.VolumeMount{{Name: "results", MountPath: ResultsMount}}
	workDir := ""
	if len(k.Files) > 0 {
		cm, items, err := k.configMap(meta(k.Name+"-files", "files"))
		if err != nil {
			return nil, err
		}
		objs = append([]any{cm}, objs...)
		volumes = append(volumes, corev1.Volume{Name: "files", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}, Items: items}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "files", MountPath: FilesMount, ReadOnly: true})
		workDir = FilesMount
	}
	pod := func(component string, args []string, env []corev1.EnvVar, res corev1.ResourceRequirements) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels(component)},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				SecurityContext: &corev1.PodSecurityContext{
					RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(User)), RunAsGroup: ptr(int64(User)), FSGroup: ptr(int64(User)),
				},
				Containers: []corev1.Container{{
					Name: "tracebed", Image: k.Image, ImagePullPolicy: pull,
					Command: []string{"tracebed"}, Args: args, Env: env, WorkingDir: workDir,
					VolumeMounts: mounts, Resources: res,
					SecurityContext: &corev1.SecurityContext{
						AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
						Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					},
				}},
				Volumes: volumes,
			},
		}
	}
	n := int32(k.Shards)
	par := n
	if k.Parallelism > 0 {
		par = min(par, int32(k.Parallelism))
	}
	shardArgs := append([]string{"run", "--quiet", "--shard", "$(JOB_COMPLETION_INDEX)/" + strconv.Itoa(k.Shards),
		"--parallel", strconv.Itoa(k.parallel()), "--out", ShardsDir}, k.Specs...)
	// The Job controller sets JOB_COMPLETION_INDEX in every pod of an
	// Indexed Job; declaring it too makes the $(…) in the args expand on
	// any cluster.
	indexEnv := []corev1.EnvVar{{Name: "JOB_COMPLETION_INDEX", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + batchv1.JobCompletionIndexAnnotation + "']"}}}}
	shards := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: meta(k.Name+"-shards", "shard"),
		Spec: batchv1.JobSpec{
			CompletionMode:       ptr(batchv1.IndexedCompletion),
			Completions:          &n,
			Parallelism:          &par,
			BackoffLimitPerIndex: ptr(int32(max(k.Retries, 0))),
			Template: pod("shard", shardArgs, indexEnv, corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: mem},
			}),
		},
	}
	mergeArgs := []string{"merge", "--wait", k.MergeWait.String()}
	for _, e := range k.Experiments {
		mergeArgs = append(mergeArgs, "--expect", e)
	}
	mergeArgs = append(mergeArgs, "--out", ResultsMount, ShardsDir)
	merge := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: meta(k.Name+"-merge", "merge"),
		Spec: batchv1.JobSpec{
			Completions:  ptr(int32(1)),
			BackoffLimit: ptr(int32(max(k.Retries, 0))),
			Template: pod("merge", mergeArgs, nil, corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: mem},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: mem},
			}),
		},
	}
	return append(objs, shards, merge), nil
}

// configMap holds Files, with the items that put each at its path.
func (k *K8s) configMap(meta metav1.ObjectMeta) (*corev1.ConfigMap, []corev1.KeyToPath, error) {
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: meta, Data: map[string]string{}}
	var items []corev1.KeyToPath
	used := map[string]bool{}
	size := 0
	for _, f := range k.Files {
		p, err := relPath(f.Path)
		if err != nil {
			return nil, nil, err
		}
		key := notKey.ReplaceAllString(p, "_")
		for i := 2; used[key]; i++ {
			key = fmt.Sprintf("%s_%d", notKey.ReplaceAllString(p, "_"), i)
		}
		used[key] = true
		if utf8.Valid(f.Data) {
			cm.Data[key] = string(f.Data)
		} else {
			// A binary trace (.memtrace): data holds UTF-8 only.
			if cm.BinaryData == nil {
				cm.BinaryData = map[string][]byte{}
			}
			cm.BinaryData[key] = f.Data
		}
		items = append(items, corev1.KeyToPath{Key: key, Path: p})
		size += len(f.Data)
	}
	// The API server stores at most 1 MiB per object.
	if size > 1<<20-16<<10 {
		return nil, nil, fmt.Errorf("the files to ship are %d bytes; a ConfigMap holds about 1 MiB: build an image with them instead (docs/scale-out.md)", size)
	}
	slices.SortFunc(items, func(a, b corev1.KeyToPath) int { return strings.Compare(a.Path, b.Path) })
	return cm, items, nil
}

var notKey = regexp.MustCompile(`[^-._a-zA-Z0-9]`)

// YAML writes the objects as one YAML stream, documents separated by
// "---", each serialized by sigs.k8s.io/yaml from its k8s.io/api type.
func (k *K8s) YAML() ([]byte, error) {
	objs, err := k.Objects()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# tracebed sweep %s: %d shards of tracebed run %s, then tracebed merge.\n# Apply with: kubectl apply -f FILE; see docs/scale-out.md.\n",
		k.Name, k.Shards, analysis.ShellQuote(k.Specs))
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}

func ptr[T any](v T) *T { return &v }
