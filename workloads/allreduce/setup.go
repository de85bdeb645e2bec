package allreduce

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/emulator/sim"
	"github.com/tracebed/tracebed/p4/ina"
	"github.com/tracebed/tracebed/topologies"
)

// Mode is how a job aggregates.
type Mode string

// Modes of a job.
const (
	ModeINA  Mode = "ina"  // through a switch (pool or shared binding)
	ModePS   Mode = "ps"   // through a parameter server only
	ModeRing Mode = "ring" // host ring all-reduce
)

// JobSpec describes a packet-level training job on a network.
type JobSpec struct {
	ID   uint16
	Mode Mode
	// Hosts run the workers, worker i on Hosts[i].
	Hosts []string
	// PSHost runs the parameter server (ModePS, and shared bindings).
	PSHost string
	// Switch is the aggregation switch (ModeINA); it must run the ina
	// pipeline (sim.Options{Pipeline: ina.SimPipeline(k)}, or a testbed
	// of program "ina").
	Switch string
	// Lower, if not empty, makes the aggregation two-level: each listed
	// switch is the ToR of some of the workers (every worker under one),
	// sums its rack's contributions and sends them up to Switch, and the
	// workers send to their ToR (docs/ina-dataplane.md, "Two-level
	// aggregation"). Every switch of the tree binds the same pool.
	Lower []string
	// Hold is when a shared-mode aggregator is released (ina.HoldCompletion
	// or ina.HoldReturn: on the result's return from the parameter server,
	// as the ATP paper does).
	Hold uint8
	// Remap is ATP's slot remapping in shared mode: packets name their
	// aggregator (ina.PlaceSlot), and the parameter server moves a window
	// slot whose chunk collided to a free one (PSJob.Remap).
	Remap bool
	// Shared binds the job in shared mode (ATP); otherwise pool mode.
	Shared bool
	// Base and Size are the job's pool of aggregators (ModeINA).
	Base, Size uint32
	// Gen is the binding generation; 0 means ID+1.
	Gen uint32
	// Group is the multicast group; 0 means ID+1.
	Group uint16
	// Window is the number of chunks in flight per worker; 0 means the pool
	// size in pool mode, 256 in shared and PS modes, and the ring's default
	// (4096 packets) for the ring.
	Window int
	// K is the number of values per packet; 0 means ina.DefaultK.
	K int
	// Elements is the tensor length (int32 values).
	Elements   int
	Iterations int
	Compute    time.Duration
	// Delay postpones the job's first iteration (its arrival).
	Delay time.Duration
	// Timeout is the retransmission timeout; 0 means 1ms.
	Timeout time.Duration
	// Port is the UDP port of the job's workers and parameter server; 0
	// means 40000+ID.
	Port uint16
	// Fill, if set, writes worker w's gradient of iteration it.
	Fill func(w, it int, tensor []int32)
	// Check, if set, checks worker w's sum of iteration it.
	Check func(w, it int, tensor []int32) error
}

// Network is what jobs are set up on. A testbed.Testbed (sim or netns)
// implements it; Setup adapts a *sim.Network.
type Network interface {
	Topology() *topologies.Topology
	// Switch returns the P4Runtime client of a switch.
	Switch(name string) (p4rt.Client, error)
	// Attach binds an agent to a UDP port of a host and starts it.
	Attach(host string, udpPort uint16, agent emulator.Agent) (emulator.Env, error)
	// Inspect runs f where it may read the state of env's agent.
	Inspect(env emulator.Env, f func())
}

// Job is a job set up on a network.
type Job struct {
	Spec    JobSpec
	Workers []*Worker
	Streams []*Stream // ModeINA and ModePS
	Rings   []*Ring   // ModeRing
	PS      *PS
	// Controller programs the aggregation switch (ModeINA) through its
	// P4Runtime client; Pipeline is that switch's data plane when the
	// network is a *sim.Network (Setup), nil otherwise. Binding is its
	// job-table entry. Controllers and Pipelines hold every switch of the
	// job's tree: the aggregation switch, then Spec.Lower in order.
	Controller  *ina.Controller
	Pipeline    *ina.Pipeline
	Binding     ina.Binding
	Controllers []*ina.Controller
	Pipelines   []*ina.Pipeline

	net      Network
	envs     []emulator.Env // workers', in worker order
	direct   bool           // Setup: the workers' Done callbacks update the fields below
	finished int
	// Finish is when the last worker finished; Err the first error. With
	// Setup they follow the run; with SetupOn they are set by Poll.
	Finish time.Duration
	Err    error
}

// Done reports whether every worker has finished. With SetupOn it reports
// what the last Poll saw.
func (j *Job) Done() bool { return j.finished == len(j.Workers) }

// Poll reads the workers' state through the network's Inspect — on netns
// the workers run concurrently on their own loops — and updates Finish, Err
// and Done. It reports whether every worker has finished. Call it from the
// goroutine that drives the testbed (for example in testbed.Run's done
// function), or after the testbed is closed.
func (j *Job) Poll() bool {
	if j.direct {
		return j.Done()
	}
	j.finished, j.Finish, j.Err = 0, 0, nil
	for i, w := range j.Workers {
		var done bool
		var at time.Duration
		var err error
		j.net.Inspect(j.envs[i], func() { done, at, err = w.Finished, w.FinishedAt, w.Err })
		if !done {
			continue
		}
		j.finished++
		j.Finish = max(j.Finish, at)
		if err != nil && j.Err == nil {
			j.Err = fmt.Errorf("job %d worker %d: %w", j.Spec.ID, i, err)
		}
	}
	return j.Done()
}

// simNetwork adapts a *sim.Network to Network.
type simNetwork struct{ *sim.Network }

func (n simNetwork) Topology() *topologies.Topology { return n.Network.Topology }

func (n simNetwork) Switch(name string) (p4rt.Client, error) {
	sw := n.Network.Switch(name)
	if sw == nil {
		return nil, fmt.Errorf("%q is not a switch of %s", name, n.Network.Topology.Name)
	}
	dev, ok := sw.Pipeline.(p4rt.Device)
	if !ok {
		return nil, fmt.Errorf("switch %s has no P4Runtime device", name)
	}
	return p4rt.Local(dev), nil
}

func (n simNetwork) Inspect(_ emulator.Env, f func()) { f() }

// Setup binds the job to a simulated network: it programs the aggregation
// switch through P4Runtime (multicast group, job-table entry), attaches the
// parameter server and the workers, and schedules the first iteration at
// the network's current time plus spec.Delay. The job's fields (Finish,
// Err, Done) follow the run, since everything runs on the simulation's
// goroutine.
func Setup(net *sim.Network, spec JobSpec) (*Job, error) {
	var pls []*ina.Pipeline
	if spec.Mode == ModeINA {
		for _, name := range append([]string{spec.Switch}, spec.Lower...) {
			sw := net.Switch(name)
			if sw == nil {
				return nil, fmt.Errorf("job %d: %q is not a switch of %s", spec.ID, name, net.Topology.Name)
			}
			pl, ok := sw.Pipeline.(*ina.Pipeline)
			if !ok {
				return nil, fmt.Errorf("job %d: switch %s does not run the INA pipeline", spec.ID, name)
			}
			pls = append(pls, pl)
		}
	}
	return setup(simNetwork{net}, spec, pls)
}

// SetupOn is Setup on any Network, such as a testbed.Testbed of either
// substrate: the aggregation switch is programmed through its P4Runtime
// client (gRPC on netns). The workers may run concurrently (netns), so the
// job's shared fields are not updated by them: Poll reads their state.
func SetupOn(net Network, spec JobSpec) (*Job, error) {
	return setup(net, spec, nil)
}

// bindTree programs every switch of the job's tree through P4Runtime:
// each one's multicast group and its binding b with the Members and Up of
// its place in the tree (ina.Tree). It returns the switches' controllers
// (the aggregation switch first) and the aggregation switch's binding.
func bindTree(net Network, spec JobSpec, b ina.Binding, addrs []emulator.Addr) ([]*ina.Controller, ina.Binding, error) {
	top := net.Topology()
	tree, err := ina.Tree(top, spec.Switch, spec.Lower, addrs)
	if err != nil {
		return nil, b, fmt.Errorf("job %d: %w", spec.ID, err)
	}
	// One deadline for the whole tree's writes. bindTree runs on the
	// driver's goroutine, before the job's agents are attached (Setup,
	// SetupOn), never inside an agent's callback: agents that program
	// switches while they run use a p4rt.Port.
	ctx, cancel := p4rt.CallContext()
	defer cancel()
	var ctls []*ina.Controller
	topBinding := b
	for i, ts := range tree {
		client, err := net.Switch(ts.Name)
		if err != nil {
			return nil, b, fmt.Errorf("job %d: %w", spec.ID, err)
		}
		ctl, err := ina.NewController(client)
		if err != nil {
			return nil, b, fmt.Errorf("job %d: switch %s does not run the INA pipeline: %w", spec.ID, ts.Name, err)
		}
		if k := pipelineK(ctl); k != spec.K {
			return nil, b, fmt.Errorf("job %d: k = %d, switch %s aggregates k = %d", spec.ID, spec.K, ts.Name, k)
		}
		if err := ctl.SetGroup(ctx, spec.Group, ts.Group); err != nil {
			return nil, b, fmt.Errorf("job %d: multicast group on %s: %w", spec.ID, ts.Name, err)
		}
		sb := b
		sb.Members, sb.Up = ts.Members, ts.Up
		if err := ctl.Bind(ctx, sb); err != nil {
			return nil, b, fmt.Errorf("job %d: bind on %s: %w", spec.ID, ts.Name, err)
		}
		if i == 0 {
			topBinding = sb
		}
		ctls = append(ctls, ctl)
	}
	return ctls, topBinding, nil
}

// pipelineK returns the values per packet of an INA data plane, from the
// value registers its P4Info declares.
func pipelineK(c *ina.Controller) int {
	k := 0
	for _, r := range c.Names().P4Info().GetRegisters() {
		if strings.HasPrefix(r.GetPreamble().GetName(), ina.RegValuePrefix) {
			k++
		}
	}
	return k
}

func setup(net Network, spec JobSpec, pls []*ina.Pipeline) (*Job, error) {
	if spec.K == 0 {
		spec.K = ina.DefaultK
	}
	if spec.Port == 0 {
		spec.Port = 40000 + spec.ID
	}
	if spec.Gen == 0 {
		spec.Gen = uint32(spec.ID) + 1
	}
	if spec.Group == 0 {
		spec.Group = spec.ID + 1
	}
	n := len(spec.Hosts)
	if n == 0 || n > ina.MaxWorkers {
		return nil, fmt.Errorf("job %d: %d workers, want 1 to %d", spec.ID, n, ina.MaxWorkers)
	}
	if spec.Elements < 0 || spec.Iterations < 0 {
		return nil, fmt.Errorf("job %d: negative size or iterations", spec.ID)
	}
	top := net.Topology()
	addrs := make([]emulator.Addr, n)
	for i, h := range spec.Hosts {
		node := top.Node(h)
		if node == nil || !node.IsHost() {
			return nil, fmt.Errorf("job %d: %q is not a host of %s", spec.ID, h, top.Name)
		}
		addrs[i] = netip.AddrPortFrom(node.IP, spec.Port)
	}
	_, direct := net.(simNetwork)
	j := &Job{Spec: spec, net: net, direct: direct}
	var psAddr emulator.Addr
	if spec.PSHost != "" {
		node := top.Node(spec.PSHost)
		if node == nil || !node.IsHost() {
			return nil, fmt.Errorf("job %d: parameter server %q is not a host of %s", spec.ID, spec.PSHost, top.Name)
		}
		psAddr = netip.AddrPortFrom(node.IP, spec.Port)
	}
	var target emulator.Addr
	targets := make([]emulator.Addr, n) // where each worker sends (its ToR in two levels)
	switch spec.Mode {
	case ModeINA:
		node := top.Node(spec.Switch)
		if node == nil || node.IsHost() {
			return nil, fmt.Errorf("job %d: %q is not a switch of %s", spec.ID, spec.Switch, top.Name)
		}
		b := ina.Binding{
			Job: spec.ID, FromRound: 0, ToRound: ina.MaxRound, Mode: ina.ModePool, Gen: spec.Gen,
			Base: spec.Base, Size: spec.Size, Workers: uint8(n), Group: spec.Group, PS: psAddr, Hold: spec.Hold,
		}
		if spec.Shared {
			b.Mode = ina.ModeShared
			if spec.Remap {
				b.Place = ina.PlaceSlot
			}
			if !psAddr.IsValid() {
				return nil, fmt.Errorf("job %d: a shared binding needs a parameter server host", spec.ID)
			}
		}
		ctls, tb, err := bindTree(net, spec, b, addrs)
		if err != nil {
			return nil, err
		}
		j.Controller, j.Binding, j.Controllers, j.Pipelines = ctls[0], tb, ctls, pls
		if len(pls) > 0 {
			j.Pipeline = pls[0]
		}
		target = netip.AddrPortFrom(node.IP, ina.Port)
		for i := range targets {
			targets[i] = target
			if len(spec.Lower) > 0 {
				targets[i] = netip.AddrPortFrom(top.Node(spec.Hosts[i]).Uplink().Node.IP, ina.Port)
			}
		}
		if spec.Window == 0 {
			spec.Window = 256
			if !spec.Shared {
				spec.Window = int(spec.Size)
			}
		}
		if !spec.Shared && spec.Window > int(spec.Size) {
			return nil, fmt.Errorf("job %d: window of %d slots exceeds the pool of %d", spec.ID, spec.Window, spec.Size)
		}
		if psAddr.IsValid() {
			ps, err := NewPS(PSJob{Job: spec.ID, Workers: addrs, Elements: spec.Elements, K: spec.K, Multicast: target,
				Republish: spec.Hold == ina.HoldReturn, Remap: spec.Remap && spec.Shared, Window: spec.Window, Size: int(spec.Size)})
			if err != nil {
				return nil, err
			}
			j.PS = ps
		}
	case ModePS:
		if !psAddr.IsValid() {
			return nil, fmt.Errorf("job %d: mode ps needs a parameter server host", spec.ID)
		}
		ps, err := NewPS(PSJob{Job: spec.ID, Workers: addrs, Elements: spec.Elements, K: spec.K})
		if err != nil {
			return nil, err
		}
		j.PS = ps
		target = psAddr
		for i := range targets {
			targets[i] = target
		}
		if spec.Window == 0 {
			spec.Window = 256
		}
	case ModeRing: // Window 0 keeps the ring's default
	default:
		return nil, fmt.Errorf("job %d: mode %q, want %s, %s or %s", spec.ID, spec.Mode, ModeINA, ModePS, ModeRing)
	}
	j.Spec = spec
	if j.PS != nil {
		if _, err := net.Attach(spec.PSHost, spec.Port, j.PS); err != nil {
			return nil, fmt.Errorf("job %d: %w", spec.ID, err)
		}
	}
	for i := range n {
		var red Reducer
		if spec.Mode == ModeRing {
			r, err := NewRing(RingConfig{Job: spec.ID, Rank: i, Peers: addrs, K: spec.K, Window: spec.Window, Timeout: spec.Timeout})
			if err != nil {
				return nil, fmt.Errorf("job %d: %w", spec.ID, err)
			}
			j.Rings = append(j.Rings, r)
			red = r
		} else {
			s, err := NewStream(StreamConfig{Job: spec.ID, Worker: uint8(i), Workers: uint8(n), Target: targets[i], Window: spec.Window, K: spec.K, Timeout: spec.Timeout,
				Remap: spec.Remap && spec.Shared && spec.Mode == ModeINA})
			if err != nil {
				return nil, fmt.Errorf("job %d: %w", spec.ID, err)
			}
			j.Streams = append(j.Streams, s)
			red = s
		}
		w := &Worker{
			Reducer: red, Tensor: make([]int32, spec.Elements), Iterations: spec.Iterations,
			Compute: spec.Compute, Delay: spec.Delay,
		}
		if direct {
			// One goroutine runs everything: the workers may update the
			// job's shared fields as they finish.
			w.Done = func(at time.Duration, err error) {
				j.finished++
				j.Finish = max(j.Finish, at)
				if err != nil && j.Err == nil {
					j.Err = fmt.Errorf("job %d worker %d: %w", spec.ID, i, err)
				}
			}
		}
		if spec.Fill != nil {
			w.Fill = func(it int, t []int32) { spec.Fill(i, it, t) }
		}
		if spec.Check != nil {
			w.Check = func(it int, t []int32) error { return spec.Check(i, it, t) }
		}
		j.Workers = append(j.Workers, w)
		env, err := net.Attach(spec.Hosts[i], spec.Port, w)
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", spec.ID, err)
		}
		j.envs = append(j.envs, env)
	}
	return j, nil
}

// JobStats summarise a finished (or running) job.
type JobStats struct {
	// Finish is when the last worker finished.
	Finish time.Duration
	// CommTime is the mean time a worker spent in all-reduce.
	CommTime time.Duration
	// Chunks is the number of chunk aggregations: ⌈elements/k⌉ × iterations.
	Chunks int
	// SwitchChunks were completed in switch memory; PSChunks by the
	// parameter server (collisions, flushes, or every chunk without switch
	// memory). INAFraction is SwitchChunks / Chunks (0 for the ring).
	SwitchChunks, PSChunks int
	INAFraction            float64
	// FallbackBytes are the INA payload bytes the parameter server received.
	FallbackBytes uint64
	// Retransmits counts the workers' retransmitted packets.
	Retransmits uint64
	// HoldTime is the aggregator time the job's partial aggregates held
	// switch memory (ina.Pipeline.HoldTime): the numerator of mem_util.
	HoldTime time.Duration
}

// Stats returns the job's statistics. It reads the agents' counters
// directly: on a testbed whose agents run concurrently (netns), call it
// after the testbed is closed.
func (j *Job) Stats() JobStats {
	s := JobStats{Finish: j.Finish}
	k := j.Spec.K
	s.Chunks = (j.Spec.Elements + k - 1) / k * j.Spec.Iterations
	var comm time.Duration
	for _, w := range j.Workers {
		comm += w.CommTime
	}
	if len(j.Workers) > 0 {
		s.CommTime = comm / time.Duration(len(j.Workers))
	}
	for _, st := range j.Streams {
		s.Retransmits += st.Stats.Retransmits
	}
	for _, r := range j.Rings {
		s.Retransmits += r.Stats.Retransmits
	}
	if j.PS != nil {
		s.PSChunks = int(j.PS.Stats.Completed)
		s.FallbackBytes = j.PS.Stats.Packets * uint64(ina.HeaderLen+4*k)
	}
	switch {
	case j.Spec.Mode == ModeINA && j.Spec.Shared:
		s.SwitchChunks = int(j.PS.Stats.FromSwitch)
	case j.Spec.Mode == ModeINA:
		s.SwitchChunks = s.Chunks
	}
	if s.Chunks > 0 {
		s.INAFraction = float64(s.SwitchChunks) / float64(s.Chunks)
	}
	for _, pl := range j.Pipelines {
		s.HoldTime += pl.HoldTime(j.Spec.ID)
	}
	return s
}
