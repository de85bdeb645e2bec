// Package models holds the deep-learning model profiles that INA training
// jobs run: for each model, the bytes of gradient every worker all-reduces
// per iteration and the compute time of one iteration on a reference GPU at a
// named batch size. Every figure and its source is listed in docs/models.md.
//
// Each iteration of a job is compute (forward and backward pass) followed by
// an all-reduce of the whole gradient (DESIGN.md §5); the profiles give both
// halves, the network decides how long the second takes.
//
// The profiles are data, beside the traces that name them: job traces
// (traces/jobs) check their model names here, and the training workloads
// read the sizes and times.
package models

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Family groups models for workload mixes.
type Family string

// Model families.
const (
	Vision   Family = "vision"
	Language Family = "language"
)

// ReferenceGPU is the GPU every compute time refers to.
const ReferenceGPU = "NVIDIA Tesla V100 (FP32)"

// EffectiveFLOPS is the training throughput, in floating-point operations
// per second, that converts a model's training FLOPs into compute time where
// no measured throughput exists: ResNet-50's measured 405 images/s on the
// V100 (FP32) times its 24.5 GFLOP of training work per image (3 × 2 ×
// 4.09 GMAC). See docs/models.md.
const EffectiveFLOPS = 405 * 3 * 2 * 4.09e9

// Profile is one model.
type Profile struct {
	Name   string
	Family Family
	// Params is the number of trainable parameters.
	Params int64
	// GradientBytes is what each worker all-reduces per iteration.
	GradientBytes int64
	// Batch is the per-GPU batch size the compute time refers to
	// (images for vision models, sequences for language models).
	Batch int
	// SeqLen is the sequence length of a language model's samples (0 for
	// vision models).
	SeqLen int
	// Compute is the forward and backward time of one iteration on
	// ReferenceGPU at Batch.
	Compute time.Duration
	// GradientSource and ComputeSource say where the two figures come from
	// (the long form is in docs/models.md).
	GradientSource, ComputeSource string
}

// CommIntensity is the profile's gradient bytes per second of compute: how
// much an iteration leans on the network (DynaINA ranks jobs by it).
func (p Profile) CommIntensity() float64 {
	return float64(p.GradientBytes) / p.Compute.Seconds()
}

// mib converts Tiresias' gradient sizes (MB in its simulator, which are
// MiB: vgg19's 547.1 is 143.7 M parameters × 4 bytes / 2^20) to bytes.
func mib(v float64) int64 { return int64(v * (1 << 20)) }

// visionCompute is the compute time of one iteration of batch images at a
// measured throughput in images per second.
func measured(batch int, imagesPerSecond float64) time.Duration {
	return roundUs(float64(batch) / imagesPerSecond)
}

// flops is the compute time of one iteration that costs f floating-point
// operations, at EffectiveFLOPS.
func flops(f float64) time.Duration { return roundUs(f / EffectiveFLOPS) }

func roundUs(s float64) time.Duration {
	return time.Duration(s*1e6+0.5) * time.Microsecond
}

// Sources, as cited in docs/models.md.
const (
	srcTiresias   = "Tiresias simulator model table (MiB)"
	srcParams     = "parameter count × 4 bytes"
	srcLambda     = "Lambda V100 FP32 TensorFlow benchmark (images/s)"
	srcVisionFLOP = "torchvision/timm GMACs × 6 × batch ÷ EffectiveFLOPS"
	srcLangFLOP   = "6 × params × tokens ÷ EffectiveFLOPS"
)

const visionBatch = 32

// vision builds a vision profile. gmacs is the forward multiply-accumulates
// per image; ips, when positive, a measured throughput that takes precedence.
func vision(name string, params int64, grad int64, gradSrc string, gmacs, ips float64) Profile {
	p := Profile{Name: name, Family: Vision, Params: params, GradientBytes: grad, Batch: visionBatch, GradientSource: gradSrc}
	if ips > 0 {
		p.Compute, p.ComputeSource = measured(visionBatch, ips), srcLambda
	} else {
		p.Compute, p.ComputeSource = flops(6*gmacs*1e9*visionBatch), srcVisionFLOP
	}
	return p
}

// language builds a transformer profile: training costs 6 FLOPs per
// parameter per token (Kaplan et al. 2020), gradients are 4 bytes per
// parameter.
func language(name string, params int64, batch, seq int) Profile {
	return Profile{
		Name: name, Family: Language, Params: params, GradientBytes: 4 * params,
		Batch: batch, SeqLen: seq,
		Compute:        flops(6 * float64(params) * float64(batch*seq)),
		GradientSource: srcParams, ComputeSource: srcLangFLOP,
	}
}

// all is the table of profiles, in the order of docs/models.md.
var all = []Profile{
	vision("alexnet", 61_100_840, mib(235.8), srcTiresias, 0.71, 0),
	vision("vgg11", 132_863_336, mib(506.5), srcTiresias, 7.61, 0),
	vision("vgg16", 138_357_544, mib(526.8), srcTiresias, 15.47, 0),
	vision("vgg19", 143_667_240, mib(547.1), srcTiresias, 19.63, 0),
	vision("resnet50", 25_557_032, mib(80.6), srcTiresias, 4.09, 405),
	vision("resnet101", 44_549_160, mib(119.7), srcTiresias, 7.80, 0),
	vision("resnet152", 60_192_808, mib(149.6), srcTiresias, 11.51, 155),
	vision("inception3", 27_161_264, mib(56.6), srcTiresias, 5.71, 259),
	vision("inception4", 42_679_816, mib(132.8), srcTiresias, 12.27, 112),
	vision("googlenet", 6_624_904, 4*6_624_904, srcParams, 1.50, 0),
	language("bert-base", 110_000_000, 32, 128),
	language("bert-large", 340_000_000, 32, 128),
	language("gpt2", 124_439_808, 8, 1024),
	language("gpt2-xl", 1_557_611_200, 2, 1024),
}

// aliases maps other spellings found in traces to profile names.
var aliases = map[string]string{
	"inception_v3": "inception3", "inceptionv3": "inception3", "inception-v3": "inception3",
	"inception_v4": "inception4", "inceptionv4": "inception4", "inception-v4": "inception4",
	"bert_base": "bert-base", "bertbase": "bert-base",
	"bert_large": "bert-large", "bertlarge": "bert-large",
	"gpt-2": "gpt2", "gpt2_xl": "gpt2-xl", "gpt-2-xl": "gpt2-xl",
	"resnet-50": "resnet50", "resnet-101": "resnet101", "resnet-152": "resnet152",
	"vgg-11": "vgg11", "vgg-16": "vgg16", "vgg-19": "vgg19",
}

// All returns every profile, vision models first.
func All() []Profile { return slices.Clone(all) }

// Names lists the profile names in table order.
func Names() []string {
	names := make([]string, len(all))
	for i, p := range all {
		names[i] = p.Name
	}
	return names
}

// OfFamily returns the profiles of one family in table order.
func OfFamily(f Family) []Profile {
	var out []Profile
	for _, p := range all {
		if p.Family == f {
			out = append(out, p)
		}
	}
	return out
}

// Lookup returns the profile with the given name, case-insensitively and
// accepting common spellings ("inception_v3", "BERT-large").
func Lookup(name string) (Profile, bool) {
	n := strings.ToLower(strings.TrimSpace(name))
	if a, ok := aliases[n]; ok {
		n = a
	}
	for _, p := range all {
		if p.Name == n {
			return p, true
		}
	}
	return Profile{}, false
}

// UnknownError says that a model name has no profile and lists those that do.
func UnknownError(name string) error {
	return fmt.Errorf("unknown model %q; want one of %s", name, strings.Join(Names(), ", "))
}
