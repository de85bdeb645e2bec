package flow

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/internal/units"
	dp "github.com/tracebed/tracebed/p4/freeina"
	"github.com/tracebed/tracebed/systems/freeina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/topologies"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	"github.com/tracebed/tracebed/traces/models"
	"github.com/tracebed/tracebed/workloads/training/fabric"
)

func freeFactory(partial bool) inasched.Factory {
	return func(mem inasched.Memory, _ int) (inasched.Scheduler, error) { return freeina.New(mem, partial), nil }
}

// TestFreeINAClosedForm: one job alone, no jitter, no turnaround. On the
// INA path each iteration is compute + G / line + RTT, line the worker's
// rate over the INA path's wire coefficient ((P + 78 + 62) / P: its
// chunk, and the acknowledgement of the aggregate it receives); without
// memory, on the PS path, compute + n·G·a / R + τ, the parameter
// server's link carrying every worker's gradient in and every worker's
// sum out. The model must give both to the nanosecond per iteration.
func TestFreeINAClosedForm(t *testing.T) {
	net := quiet()
	for _, model := range []string{"vgg16", "resnet50", "bert-base"} {
		for _, n := range []int{2, 4, 8} {
			for _, aggs := range []int{8192, 0} {
				t.Run(fmt.Sprintf("%s/%d/%d", model, n, aggs), func(t *testing.T) {
					top := star(t, 8, aggs, 100*units.Gbps)
					prof, _ := models.Lookup(model)
					const iters = 20
					trace := []jobtrace.Job{{ID: 0, Model: model, Workers: n, Iterations: iters}}
					o := simulate(t, Setup{Top: top, Net: net, Jobs: trace, Policy: freeFactory(true), Seed: 1})
					G, R := float64(prof.GradientBytes), 100e9
					var comm float64
					if aggs > 0 {
						rtt := 2 * (1e-6 + float64(1024+fabric.RDMAHeader)*8/R)
						comm = G*fabric.RDMACoef(1024)*8/R + rtt
					} else {
						frame := float64(fabric.PSMTU+fabric.PSMiddle) * 8 / R
						tau := 4 * (1e-6 + frame)
						comm = float64(n)*G*fabric.PSCoef()*8/R + tau
					}
					want := iters * (prof.Compute.Seconds() + comm)
					if got := o.Jobs[0].JCT(); !near(got, want, 1e-9) {
						t.Errorf("JCT %.9f s, closed form %.9f s", got, want)
					}
					if aggs > 0 && o.INAFraction != 1 || aggs == 0 && (o.INAFraction != 0 || o.FallbackBytes != float64(iters*n)*G) {
						t.Errorf("ina_fraction %v, fallback %v", o.INAFraction, o.FallbackBytes)
					}
				})
			}
		}
	}
}

// TestFreeINAProperties runs random traces on stars and leaf-spines: every
// job finishes above its physical bound with its whole gradient
// all-reduced; memory is held only during all-reduces (mem_util below the
// fraction of time jobs communicate); every binding goes through
// P4Runtime to FreeINA's data plane, and none is left when the run ends;
// the same seed gives the same outcome.
func TestFreeINAProperties(t *testing.T) {
	for i := range 6 {
		var top *topologies.Topology
		if i%2 == 0 {
			top = star(t, 16, []int{64, 512, 4096}[i/2], 100*units.Gbps)
		} else {
			top = leafSpine(t, 2, 2, 6, []float64{1, 2, 4}[i/2], 1024)
		}
		trace := randomTrace(uint64(i+1), 12, min(16, len(top.Hosts())))
		t.Run(top.Name+fmt.Sprint(i), func(t *testing.T) {
			binder, err := FreeSimBinder(top, 0, trace, nil)
			if err != nil {
				t.Fatal(err)
			}
			net := fabric.DefaultNet
			net.Jitter = 0.05
			s := Setup{Top: top, Net: net, Jobs: trace, Policy: freeFactory(true), Binder: binder, Seed: uint64(i)}
			o := simulate(t, s)
			for _, j := range o.Jobs {
				prof, _ := models.Lookup(j.Model)
				if j.JCT() < j.Bound*(1-1e-9) {
					t.Errorf("job %d: JCT %.6f below its bound %.6f", j.ID, j.JCT(), j.Bound)
				}
				if j.Workers > 1 && !near(j.Gradient, float64(j.Iterations)*float64(prof.GradientBytes), 1e-9) {
					t.Errorf("job %d: all-reduced %.0f bytes", j.ID, j.Gradient)
				}
			}
			if o.MemUtil < 0 || o.MemUtil > 1 || o.INAFraction < 0 || o.INAFraction > 1 {
				t.Errorf("mem_util %v ina_fraction %v", o.MemUtil, o.INAFraction)
			}
			for _, sw := range top.Switches() {
				ctl := binder.Controller(sw.Name)
				if ctl == nil {
					continue
				}
				q, err := ctl.Names().TableQuery(dp.TableJobs)
				if err != nil {
					t.Fatal(err)
				}
				clients := binderClients(binder, sw.Name)
				ents, err := clients.Read(context.Background(), q)
				if err != nil {
					t.Fatal(err)
				}
				if len(ents) != 0 {
					t.Errorf("%s: %d bindings left after the run", sw.Name, len(ents))
				}
			}
			if o.Rebinds == 0 && o.INAFraction > 0 {
				t.Error("INA without a binding written")
			}
			s.Binder = nil
			a, b := simulate(t, s), simulate(t, s)
			if !reflect.DeepEqual(a, b) {
				t.Error("two runs of one seed differ")
			}
		})
	}
}

// binderClients reads a switch of a FreeSimBinder back (its controller's
// client).
func binderClients(b *freeina.P4RT, sw string) p4rt.Client { return b.Controller(sw).Client() }

// freeChecker checks every binding FreeINA makes against the job's
// estimate: the INA path only where it beats the PS path.
type freeChecker struct {
	*freeina.Scheduler
	t    *testing.T
	jobs map[int]inasched.Job
	ina  *int
}

func (c *freeChecker) Admit(now time.Duration, j inasched.Job) {
	c.jobs[j.ID] = j
	c.Scheduler.Admit(now, j)
}

func (c *freeChecker) Binding(now time.Duration, id int) inasched.Binding {
	b := c.Scheduler.Binding(now, id)
	j := c.jobs[id]
	if b.Mode == inasched.RDMA {
		*c.ina++
		if j.RDMATime(b.Size) > j.CommPSPath || b.Size%j.SlotRDMA != 0 || b.Size > j.DemandRDMA {
			c.t.Errorf("job %d (%d workers) on %v: INA path %v, PS path %v", id, j.Workers, b, j.RDMATime(b.Size), j.CommPSPath)
		}
	}
	return b
}

// TestFreeINANoSlowerINA: over random leaf-spines, memory sizes and
// traces, FreeINA grants memory only where the INA path beats the PS
// path by the estimate, in whole slots, at most the job's window.
func TestFreeINANoSlowerINA(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 1))
	for i := range 8 {
		top := leafSpine(t, 1+r.IntN(3), 2+r.IntN(2), 2+r.IntN(6), []float64{1, 2, 4}[r.IntN(3)], []int{32, 256, 2048}[r.IntN(3)])
		trace := randomTrace(uint64(i+1), 10, min(32, len(top.Hosts())))
		t.Run(top.Name, func(t *testing.T) {
			var ina int
			f := func(mem inasched.Memory, _ int) (inasched.Scheduler, error) {
				return &freeChecker{Scheduler: freeina.New(mem, true), t: t, jobs: map[int]inasched.Job{}, ina: &ina}, nil
			}
			simulate(t, Setup{Top: top, Net: fabric.DefaultNet, Jobs: trace, Policy: f, Seed: uint64(i)})
			t.Logf("%d INA all-reduces", ina)
		})
	}
}
