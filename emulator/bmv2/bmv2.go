// Package bmv2 runs tracebed's data planes on the P4 reference software
// switch: it compiles a program's P4-16 source with p4c-bm2-ss (bmv2 JSON
// and P4Info), starts one simple_switch_grpc per topology switch inside the
// switch's network namespace with the topology's port numbers, and, once a
// controller has pushed the pipeline (SetForwardingPipelineConfig with the
// JSON and the P4Info), installs the entries the program's Go twin starts
// with (the topology's routes).
//
// Neither tool ships with tracebed. FindTools says what is missing and how
// to get it; docs/bmv2.md explains how to run on the P4 tutorials VM,
// which has both.
//
// Starting the switches in network namespaces (Start) is Linux-only;
// compiling a program and computing its initial entries work everywhere.
package bmv2

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tracebed/tracebed/emulator/dataplane"
)

// Tool names.
const (
	SwitchTool   = "simple_switch_grpc"
	CompilerTool = "p4c-bm2-ss"
)

// DeviceID is the P4Runtime device id the switches are started with.
const DeviceID = 1

// Options configure the bmv2 switches.
type Options struct {
	// Switch and Compiler are the tools' paths; empty means looking
	// them up on PATH.
	Switch, Compiler string
	// CacheDir holds compiled programs, by hash of source and compiler
	// version; empty means tracebed/bmv2 under the user's cache
	// directory.
	CacheDir string
	// LogLevel is simple_switch_grpc's --log-level (trace, debug, info,
	// warn, error, off); empty means warn. Per-packet levels (debug,
	// trace) slow the switch down by orders of magnitude.
	LogLevel string
	// SingleQueue leaves out --priority-queues, which otherwise gives
	// every port of a switch with more than one queue in the topology
	// that many strict-priority queues (simple_switch_grpc 1.15 and
	// later; older builds refuse the option). Without it bmv2 drops
	// every packet whose program sets a priority above 0 ("Priority out
	// of range"): fwd.p4 sets it from the DSCP class, farmem.p4 by
	// message class.
	SingleQueue bool
	// DirectLinks attaches simple_switch_grpc to the links' interfaces
	// themselves, without the link stages of StartStages: the links then
	// have no delay, loss, duplication or reordering and bmv2's egress is
	// not paced at the link's rate.
	DirectLinks bool
	// CPUPort is the --cpu-port for P4Runtime packet-in/out; 0 leaves
	// it off. fwd.p4 and farmem.p4 use emulator.CPUPort (510), which the
	// netns testbed passes.
	CPUPort int
}

// Tools are the located bmv2 tools.
type Tools struct {
	Switch, Compiler string
}

// Install says how to get the tools.
const Install = `simple_switch_grpc comes from p4lang/behavioral-model built with P4Runtime support (--with-pi), p4c-bm2-ss from p4lang/p4c.
The P4 tutorials VM (github.com/p4lang/tutorials, "Obtaining required software") has both; on Ubuntu the p4lang packages
(p4lang-bmv2 and p4lang-p4c from the openSUSE Build Service project home:p4lang) install them; or build them from source as their READMEs describe.
Put them on PATH, or use --switch go (the Go switch, built in).`

// FindTools locates simple_switch_grpc and p4c-bm2-ss. Its error names
// every missing tool and says how to get it.
func FindTools(opts Options) (Tools, error) {
	var t Tools
	var missing []string
	for _, x := range []struct {
		dst  *string
		path string
		name string
	}{{&t.Switch, opts.Switch, SwitchTool}, {&t.Compiler, opts.Compiler, CompilerTool}} {
		p := x.path
		if p == "" {
			p = x.name
		}
		found, err := exec.LookPath(p)
		if err != nil {
			missing = append(missing, x.name)
			continue
		}
		*x.dst = found
	}
	if len(missing) > 0 {
		return t, fmt.Errorf("--switch bmv2 needs %s, not found on PATH.\n%s", strings.Join(missing, " and "), Install)
	}
	return t, nil
}

// Program is a data plane compiled for bmv2.
type Program struct {
	Name   string
	JSON   []byte // simple_switch's configuration: the P4Runtime p4_device_config
	P4Info *p4configv1.P4Info
	Dir    string // where the compiler's outputs are kept
	// Warnings is what the compiler printed for a program it compiled:
	// its warnings (empty for a clean compilation).
	Warnings string
}

// Compile compiles the P4-16 source (fwd, ina, farmem, freeina: package p4) of prog (its Source) with p4c-bm2-ss
// for the v1model architecture, or returns the cached result of an earlier
// compilation of the same source by the same compiler.
func Compile(ctx context.Context, prog *dataplane.Program, opts Options) (*Program, error) {
	program, src := prog.Name, prog.Source
	if len(src) == 0 {
		return nil, fmt.Errorf("bmv2: program %s has no P4 source to compile", program)
	}
	tools, err := FindTools(opts)
	if err != nil {
		return nil, err
	}
	version, err := exec.CommandContext(ctx, tools.Compiler, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("bmv2: %s --version: %w\n%s", tools.Compiler, err, version)
	}
	h := sha256.New()
	h.Write(src)
	h.Write(version)
	cache := opts.CacheDir
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		cache = filepath.Join(base, "tracebed", "bmv2")
	}
	dir := filepath.Join(cache, program+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	jsonPath, infoPath := filepath.Join(dir, program+".json"), filepath.Join(dir, program+".p4info.txtpb")
	if _, err := os.Stat(infoPath); err != nil {
		if err := compile(ctx, tools.Compiler, program, src, dir, cache); err != nil {
			return nil, err
		}
	}
	return load(program, dir, jsonPath, infoPath)
}

// compile runs p4c-bm2-ss in a fresh directory and moves it to dir.
func compile(ctx context.Context, compiler, program string, src []byte, dir, cache string) error {
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return fmt.Errorf("bmv2: %w", err)
	}
	tmp, err := os.MkdirTemp(cache, program+"-tmp-")
	if err != nil {
		return fmt.Errorf("bmv2: %w", err)
	}
	defer os.RemoveAll(tmp)
	srcPath := filepath.Join(tmp, program+".p4")
	if err := os.WriteFile(srcPath, src, 0o644); err != nil {
		return fmt.Errorf("bmv2: %w", err)
	}
	args := CompileArgs(srcPath, filepath.Join(tmp, program+".json"), filepath.Join(tmp, program+".p4info.txtpb"))
	cmd := exec.CommandContext(ctx, compiler, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bmv2: %s %s: %w\n%s", compiler, strings.Join(args, " "), err, out.String())
	}
	if err := os.WriteFile(filepath.Join(tmp, logName), out.Bytes(), 0o644); err != nil {
		return fmt.Errorf("bmv2: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) {
		// Another run compiled the same program at the same time: keep
		// theirs.
		if _, serr := os.Stat(dir); serr != nil {
			return fmt.Errorf("bmv2: %w", err)
		}
	}
	return nil
}

// CompileArgs is p4c-bm2-ss's command line: v1model, the bmv2 JSON to
// jsonOut and the P4Info in protobuf text format to infoOut.
func CompileArgs(src, jsonOut, infoOut string) []string {
	return []string{"--arch", "v1model", "-o", jsonOut, "--p4runtime-files", infoOut, src}
}

func load(program, dir, jsonPath, infoPath string) (*Program, error) {
	js, err := os.ReadFile(jsonPath)
	if err != nil {
		return nil, fmt.Errorf("bmv2: compiled %s: %w", program, err)
	}
	txt, err := os.ReadFile(infoPath)
	if err != nil {
		return nil, fmt.Errorf("bmv2: compiled %s: %w", program, err)
	}
	info := &p4configv1.P4Info{}
	if err := prototext.Unmarshal(txt, info); err != nil {
		return nil, fmt.Errorf("bmv2: %s: %w", infoPath, err)
	}
	warnings, _ := os.ReadFile(filepath.Join(dir, logName))
	return &Program{Name: program, JSON: js, P4Info: info, Dir: dir, Warnings: string(warnings)}, nil
}

// logName is the file of the compiler's output in a compiled program's
// directory.
const logName = "p4c.log"
