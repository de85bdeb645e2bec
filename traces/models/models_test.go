package models

import (
	"math"
	"testing"
	"time"
)

func TestProfiles(t *testing.T) {
	want := []string{"alexnet", "vgg11", "vgg16", "vgg19", "resnet50", "resnet101", "resnet152",
		"inception3", "inception4", "googlenet", "bert-base", "bert-large", "gpt2", "gpt2-xl"}
	for _, name := range want {
		p, ok := Lookup(name)
		if !ok {
			t.Errorf("no profile %s", name)
			continue
		}
		if p.GradientBytes <= 0 || p.Compute <= 0 || p.Batch <= 0 || p.Params <= 0 || p.GradientSource == "" || p.ComputeSource == "" {
			t.Errorf("%s: incomplete profile %+v", name, p)
		}
	}
	if len(All()) != len(want) {
		t.Errorf("%d profiles; the table in docs/models.md lists %d", len(All()), len(want))
	}
}

// TestTiresiasGradients checks the gradient sizes against the Tiresias
// simulator's table (MiB), quoted in ../shared/traces/README.md.
func TestTiresiasGradients(t *testing.T) {
	for name, mb := range map[string]float64{
		"vgg19": 547.1, "vgg16": 526.8, "vgg11": 506.5, "alexnet": 235.8, "resnet152": 149.6,
		"inception4": 132.8, "resnet101": 119.7, "resnet50": 80.6, "inception3": 56.6,
	} {
		p, _ := Lookup(name)
		if got := float64(p.GradientBytes) / (1 << 20); math.Abs(got-mb) > 0.001 {
			t.Errorf("%s: %.3f MiB; Tiresias lists %.1f", name, got, mb)
		}
	}
	// Tiresias' MB are MiB: vgg19's 547.1 is its 143.7 M parameters × 4 bytes.
	vgg19, _ := Lookup("vgg19")
	if r := float64(vgg19.Params*4) / float64(vgg19.GradientBytes); math.Abs(r-1) > 0.01 {
		t.Errorf("vgg19: params × 4 / gradient = %.4f; want 1 ± 1%%", r)
	}
}

func TestComputeTimes(t *testing.T) {
	// Measured throughputs: batch 32 at 405 images/s is 79.0 ms.
	if p, _ := Lookup("resnet50"); p.Compute != 79012*time.Microsecond {
		t.Errorf("resnet50 compute %v; want 79.012ms (32 / 405 images/s)", p.Compute)
	}
	// The FLOP-based estimate reproduces ResNet-50's measured time by
	// construction of EffectiveFLOPS.
	if got := flops(6 * 4.09e9 * 32); got != 79012*time.Microsecond {
		t.Errorf("flops estimate for resnet50: %v", got)
	}
	// Language models: 6 × params × tokens.
	p, _ := Lookup("bert-base")
	want := 6 * 110e6 * 32 * 128 / EffectiveFLOPS
	if math.Abs(p.Compute.Seconds()-want) > 1e-6 {
		t.Errorf("bert-base compute %v; want %.6f s", p.Compute, want)
	}
}

func TestLookupSpellings(t *testing.T) {
	for in, want := range map[string]string{
		"VGG16": "vgg16", "inception_v3": "inception3", "Inception-V4": "inception4", " gpt-2 ": "gpt2", "BERT_large": "bert-large",
	} {
		p, ok := Lookup(in)
		if !ok || p.Name != want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", in, p.Name, ok, want)
		}
	}
	if _, ok := Lookup("lenet"); ok {
		t.Error("lenet found")
	}
	if UnknownError("lenet") == nil {
		t.Error("no error")
	}
}

func TestFamilies(t *testing.T) {
	v, l := OfFamily(Vision), OfFamily(Language)
	if len(v) != 10 || len(l) != 4 {
		t.Errorf("%d vision and %d language models; want 10 and 4", len(v), len(l))
	}
}
