package deploy

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tracebed/tracebed/analysis"
)

// Slurm is a sweep as a Slurm batch script.
type Slurm struct {
	Sweep
	// Tracebed is the command that runs tracebed on the compute nodes:
	// "tracebed" on PATH, a path, or a container runtime's command line
	// such as "apptainer exec tracebed.sif tracebed".
	Tracebed string
	// Results is the directory, shared by the nodes, for the shards
	// (RESULTS/shards), the logs (RESULTS/logs) and the merged results.
	Results string
	// Time is each shard's time limit (0: the partition's default);
	// Memory its memory (e.g. 4G; "": the partition's default).
	Time   time.Duration
	Memory string
	// Partition and Account are passed to sbatch when set.
	Partition, Account string
	// Concurrent caps the array tasks running at once (0: no cap).
	Concurrent int
}

// Script returns the batch script. Submitted with sbatch it is an array job
// of Shards tasks, task I running tracebed run --shard I/N. Run with bash
// (outside a Slurm job), it submits itself as that array and then the merge
// as a job that starts once every task has succeeded
// (--dependency=afterok).
func (s *Slurm) Script() ([]byte, error) {
	if err := s.Sweep.check(); err != nil {
		return nil, err
	}
	tracebed := s.Tracebed
	if tracebed == "" {
		tracebed = "tracebed"
	}
	results := s.Results
	if results == "" {
		results = "results"
	}
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("#!/bin/bash\n")
	w("# tracebed sweep %s on Slurm: %d array tasks, task I running shard I/%d of\n", s.Name, s.Shards, s.Shards)
	w("#   tracebed run %s\n", analysis.ShellQuote(s.Specs))
	w("# then tracebed merge, as a job that starts once every task has succeeded.\n")
	w("#\n# Submit both with:   bash THIS-FILE\n")
	w("# (sbatch THIS-FILE submits the array alone; merge later with\n")
	w("#  %s merge --out %s %s/shards)\n", tracebed, results, results)
	w("# RESULTS must be on a file system every node shares. See docs/scale-out.md.\n")
	w("#\n")
	w("#SBATCH --job-name=%s\n", s.Name)
	array := fmt.Sprintf("0-%d", s.Shards-1)
	if s.Concurrent > 0 {
		array += "%" + strconv.Itoa(s.Concurrent)
	}
	w("#SBATCH --array=%s\n", array)
	w("#SBATCH --ntasks=1\n")
	w("#SBATCH --cpus-per-task=%d\n", s.parallel())
	if s.Memory != "" {
		w("#SBATCH --mem=%s\n", s.Memory)
	}
	if s.Time > 0 {
		w("#SBATCH --time=%s\n", slurmTime(s.Time))
	}
	if s.Partition != "" {
		w("#SBATCH --partition=%s\n", s.Partition)
	}
	if s.Account != "" {
		w("#SBATCH --account=%s\n", s.Account)
	}
	w("#SBATCH --output=%s/logs/%%x-%%a.out\n", results)
	w("set -euo pipefail\n\n")
	w("TRACEBED=(%s)\n", analysis.ShellQuote(strings.Fields(tracebed)))
	w("RESULTS=%s\n", analysis.ShellQuote([]string{results}))
	w("SPECS=(%s)\n\n", analysis.ShellQuote(s.Specs))
	w("if [[ -z \"${SLURM_JOB_ID:-}\" ]]; then\n")
	w("\t# Not in a Slurm job: submit this file as the array, then the merge.\n")
	w("\tmkdir -p \"$RESULTS/logs\" \"$RESULTS/shards\"\n")
	w("\tarray=$(sbatch --parsable \"$0\")\n")
	w("\tarray=${array%%%%;*} # --parsable prints JOBID[;CLUSTER]\n")
	mergeOpts := "--job-name=" + s.Name + "-merge --ntasks=1 --cpus-per-task=1"
	if s.Partition != "" {
		mergeOpts += " --partition=" + s.Partition
	}
	if s.Account != "" {
		mergeOpts += " --account=" + s.Account
	}
	w("\tmerge=$(sbatch --parsable --dependency=afterok:\"$array\" --kill-on-invalid-dep=yes %s \\\n", mergeOpts)
	w("\t\t--output=\"$RESULTS/logs/%%x.out\" --wrap=\"$(printf '%%q ' \"${TRACEBED[@]}\" merge --out \"$RESULTS\" \"$RESULTS/shards\")\")\n")
	w("\techo \"submitted the shards as job $array (%d tasks) and the merge as job ${merge%%%%;*}; results in $RESULTS\"\n", s.Shards)
	w("\texit 0\n")
	w("fi\n\n")
	w("# Array task I: shard I of %d.\n", s.Shards)
	w("exec \"${TRACEBED[@]}\" run --quiet --shard \"${SLURM_ARRAY_TASK_ID}/%d\" --parallel \"${SLURM_CPUS_PER_TASK:-%d}\" \\\n", s.Shards, s.parallel())
	w("\t--out \"$RESULTS/shards\" \"${SPECS[@]}\"\n")
	return b.Bytes(), nil
}

// slurmTime writes d as Slurm's D-HH:MM:SS, rounded up to the second.
func slurmTime(d time.Duration) string {
	sec := int64((d + time.Second - 1) / time.Second)
	days, sec := sec/86400, sec%86400
	return fmt.Sprintf("%d-%02d:%02d:%02d", days, sec/3600, sec/60%60, sec%60)
}
