package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/tracebed/tracebed/deploy"
	"github.com/tracebed/tracebed/experiments"
)

func (a *app) exportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write what a cluster runs to run a sweep as shards (Kubernetes, Slurm)",
		Long: `Write the jobs that run the specs' runs as N shards on a cluster —
'tracebed run --shard I/N' for I = 0…N-1 — and then 'tracebed merge', which
writes results identical to a run on one machine. See docs/scale-out.md.`,
	}
	cmd.AddCommand(a.exportK8sCommand(), a.exportSlurmCommand())
	return cmd
}

// sweepFlags are the flags every export shares.
type sweepFlags struct {
	shards   int
	parallel int
	name     string
	out      string
}

func (f *sweepFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&f.shards, "shards", 0, "number of shards N (required)")
	fl.IntVar(&f.parallel, "parallel", 1, "runs each shard executes at once (its CPUs)")
	fl.StringVar(&f.name, "name", "", "name of the jobs (default: tracebed-EXPERIMENT, or tracebed-sweep for several specs)")
	fl.StringVarP(&f.out, "out", "o", "", "write to this file instead of stdout")
}

// sweep loads and compiles the specs (bad ones fail here, not on the
// cluster), plans their shards and describes the plan on stderr.
func (a *app) sweep(args []string, f *sweepFlags) (deploy.Sweep, []*experiments.Spec, error) {
	if f.shards < 1 || f.shards > experiments.MaxShards {
		return deploy.Sweep{}, nil, badInput(fmt.Errorf("--shards %d: want 1 to %d", f.shards, experiments.MaxShards))
	}
	if f.parallel < 1 {
		return deploy.Sweep{}, nil, badInput(fmt.Errorf("--parallel %d: want 1 or more", f.parallel))
	}
	specs, err := a.loadSpecs(args)
	if err != nil {
		return deploy.Sweep{}, nil, err
	}
	sw := deploy.Sweep{Name: f.name, Specs: args, Shards: f.shards, Parallel: f.parallel}
	most := 0
	for _, s := range specs {
		exp, err := a.registry.Compile(s)
		if err != nil {
			return deploy.Sweep{}, nil, badInput(err)
		}
		sw.Experiments = append(sw.Experiments, s.Name)
		plan := experiments.NewPlan(s, exp, f.shards)
		most = max(most, len(plan.Runs))
		fmt.Fprintf(a.stderr, "%s: %d runs in %d shards; the most loaded shard has %.2f× the mean estimated cost\n", s.Name, len(plan.Runs), f.shards, plan.Imbalance())
	}
	if f.shards > most {
		return deploy.Sweep{}, nil, badInput(fmt.Errorf("--shards %d: the specs have at most %d runs, so %d of the shards would have nothing to do; give --shards %d or fewer", f.shards, most, f.shards-most, most))
	}
	if sw.Name == "" {
		sw.Name = deploy.Name("sweep")
		if len(specs) == 1 {
			sw.Name = deploy.Name(specs[0].Name)
		}
	}
	return sw, specs, nil
}

// writeExport writes data to path, or to stdout when path is "".
func (a *app) writeExport(path string, data []byte, mode os.FileMode) error {
	if path == "" {
		_, err := a.stdout.Write(data)
		return err
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "wrote %s\n", path)
	return nil
}

func (a *app) exportK8sCommand() *cobra.Command {
	var (
		f       sweepFlags
		k       deploy.K8s
		noFiles bool
	)
	cmd := &cobra.Command{
		Use:   "k8s [flags] [SPEC...]",
		Short: "Write Kubernetes objects: an Indexed Job of shards and a merge Job",
		Long: `Write, as one YAML stream for 'kubectl apply -f', an Indexed Job
(completionMode: Indexed, completions: N) whose pod I runs
'tracebed run --shard I/N SPEC…' (I from JOB_COMPLETION_INDEX) into a
ReadWriteMany volume at /results/shards, and a Job that runs
'tracebed merge --wait' into /results once every shard is there. The
objects are k8s.io/api types, serialized with sigs.k8s.io/yaml.

A SPEC that is a file here (not a ready experiment of the image) is shipped
in a ConfigMap mounted as the pods' working directory, with the topology
and trace files its top level names. --image is the image the pods run:
build it with 'tracebed image' and push it where the cluster pulls from.
Without SPEC, the shards run the default suite.`,
		Example: "  tracebed export k8s dynaina-sweep --shards 16 --image registry.example.org/tracebed:COMMIT > sweep.yaml\n  kubectl apply -f sweep.yaml",
		RunE: func(cmd *cobra.Command, args []string) error {
			sw, specs, err := a.sweep(args, &f)
			if err != nil {
				return err
			}
			k.Sweep = sw
			if k.Image == "" {
				return badInput(errors.New("--image: give the image the pods run (tracebed image builds one; push it to a registry the cluster pulls from)"))
			}
			if !noFiles {
				shipped := map[string]bool{}
				for i, s := range specs {
					if i >= len(args) {
						break // the default suite: in the image
					}
					files, err := specFiles(args[i], s)
					if err != nil {
						return badInput(err)
					}
					for _, file := range files {
						if !shipped[file.Path] {
							shipped[file.Path] = true
							k.Files = append(k.Files, file)
						}
					}
				}
			}
			data, err := k.YAML()
			if err != nil {
				return badInput(err)
			}
			return a.writeExport(f.out, data, 0o644)
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&k.Image, "image", "", "image the pods run (required), e.g. registry.example.org/tracebed:COMMIT")
	fl.StringVar(&k.ImagePullPolicy, "pull", "IfNotPresent", "image pull policy: IfNotPresent, Always or Never")
	fl.StringVarP(&k.Namespace, "namespace", "n", "", "namespace of the objects (default: kubectl's)")
	fl.StringVar(&k.Claim, "claim", "", "an existing ReadWriteMany PersistentVolumeClaim for the results (default: create NAME-results)")
	fl.StringVar(&k.Storage, "storage", "1Gi", "size of the results claim created")
	fl.StringVar(&k.StorageClass, "storage-class", "", "storage class of the results claim created (default: the cluster's)")
	fl.StringVar(&k.Memory, "memory", "2Gi", "memory request and limit of each pod")
	fl.IntVar(&k.Parallelism, "parallelism", 0, "shards running at once (default: all)")
	fl.IntVar(&k.Retries, "retries", 2, "retries of a failed shard (backoffLimitPerIndex) and of the merge")
	fl.DurationVar(&k.MergeWait, "merge-wait", 24*time.Hour, "how long the merge Job waits for the shards")
	fl.BoolVar(&noFiles, "no-files", false, "ship no spec files in a ConfigMap (the image has them)")
	return cmd
}

func (a *app) exportSlurmCommand() *cobra.Command {
	var (
		f sweepFlags
		s deploy.Slurm
	)
	cmd := &cobra.Command{
		Use:   "slurm [flags] [SPEC...]",
		Short: "Write a Slurm batch script: an array of shards and a dependent merge",
		Long: `Write an sbatch script whose array tasks 0…N-1 (--array=0-N-1) each run
'tracebed run --shard I/N SPEC…' (I from SLURM_ARRAY_TASK_ID) into
RESULTS/shards. Run it with bash on a login node: it submits itself as the
array, then 'tracebed merge' into RESULTS as a job that starts once every
task has succeeded (--dependency=afterok). RESULTS and the spec files must
be on a file system the nodes share; tracebed must be on the nodes' PATH,
or give --tracebed (a path, or e.g. "apptainer exec tracebed.sif tracebed").`,
		Example: "  tracebed export slurm dynaina-sweep --shards 16 --time 2h > sweep.sbatch\n  bash sweep.sbatch",
		RunE: func(cmd *cobra.Command, args []string) error {
			sw, _, err := a.sweep(args, &f)
			if err != nil {
				return err
			}
			s.Sweep = sw
			data, err := s.Script()
			if err != nil {
				return badInput(err)
			}
			return a.writeExport(f.out, data, 0o755)
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&s.Tracebed, "tracebed", "tracebed", "command that runs tracebed on the nodes")
	fl.StringVar(&s.Results, "results", "results", "directory for shards, logs and merged results, on a shared file system (relative: to the directory you submit from)")
	fl.DurationVar(&s.Time, "time", 0, "time limit of each shard (default: the partition's)")
	fl.StringVar(&s.Memory, "mem", "", "memory of each shard, e.g. 4G (default: the partition's)")
	fl.StringVar(&s.Partition, "partition", "", "Slurm partition")
	fl.StringVar(&s.Account, "account", "", "Slurm account")
	fl.IntVar(&s.Concurrent, "concurrent", 0, "array tasks running at once (default: no cap)")
	return cmd
}

// specFiles returns the files a pod needs to run spec arg as it runs
// here: the spec file when arg names one on disk, and the topology and
// trace files its top level names when they are files here too (ready
// topologies and traces are in the image). Each keeps the path, relative
// to the working directory, at which tracebed finds it here.
func specFiles(arg string, s *experiments.Spec) ([]deploy.File, error) {
	data, err := os.ReadFile(arg)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // a ready spec
	}
	if err != nil {
		return nil, err
	}
	files := []deploy.File{{Path: filepath.ToSlash(arg), Data: data}}
	// Where tracebed looks, in order: a topology next to the spec, then
	// as given; a trace as given, then next to the spec. The file found
	// here is shipped at the path it was found at.
	var refs [][]string
	next := func(ref string) string { return filepath.Join(filepath.Dir(arg), ref) }
	if s.TopologyNode != nil && s.TopologyNode.Kind == yaml.ScalarNode {
		ref := s.TopologyNode.Value
		refs = append(refs, []string{ref, next(ref), ref})
	}
	if s.Trace != "" {
		refs = append(refs, []string{s.Trace, s.Trace, next(s.Trace)})
	}
	for _, r := range refs {
		if filepath.IsAbs(r[0]) {
			return nil, fmt.Errorf("%s: %s is an absolute path, which the pods cannot see: make it relative to the spec", arg, r[0])
		}
		for _, p := range r[1:] {
			if d, err := os.ReadFile(p); err == nil {
				files = append(files, deploy.File{Path: filepath.ToSlash(p), Data: d})
				break
			}
		}
	}
	return files, nil
}
