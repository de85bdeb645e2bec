package testbed

import (
	"bytes"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"github.com/tracebed/tracebed/emulator"
)

// HostLatency is a model of the receive path of a real host — interrupt,
// softirq, socket, the wake-up of the thread that reads it — which the
// simulated hosts do not have: they hand a datagram to its agent the
// instant its last bit arrives. Each datagram reaches its agent after a
// log-normally distributed delay (median Median, shape Sigma), in arrival
// order. On the netns substrate real hosts supply this latency themselves;
// the model exists so that a simulation can be compared with them.
//
// It matters where a protocol's behaviour depends on the spread of its
// hosts' reaction times: in shared mode (ATP) a chunk holds its aggregator
// from its first worker's packet to its last, so the spread of the
// workers' turnarounds decides how often other chunks collide. Simulated
// workers react in perfect lock step; real ones do not (docs/dynaina.md,
// "Packet level"). Any experiment may wrap its sim testbed with it.
type HostLatency struct {
	Median time.Duration
	Sigma  float64
}

// On reports whether the model adds any latency.
func (h HostLatency) On() bool { return h.Median > 0 }

// draw returns one latency.
func (h HostLatency) draw(r *rand.Rand) time.Duration {
	return time.Duration(float64(h.Median) * math.Exp(h.Sigma*r.NormFloat64()))
}

// WithHostLatency returns tb with h applied to every agent attached to it.
func WithHostLatency(tb Testbed, h HostLatency, seed uint64) Testbed {
	if !h.On() {
		return tb
	}
	return &latentTestbed{Testbed: tb, h: h, seed: seed}
}

type latentTestbed struct {
	Testbed
	h    HostLatency
	seed uint64
}

// Attach implements Testbed.
func (t *latentTestbed) Attach(host string, udpPort uint16, agent emulator.Agent) (emulator.Env, error) {
	return t.Testbed.Attach(host, udpPort, &latentAgent{Agent: agent, h: t.h, seed: t.seed})
}

// latentAgent delays each datagram on its way to the agent.
type latentAgent struct {
	emulator.Agent
	h    HostLatency
	seed uint64
	env  emulator.Env
	rng  *rand.Rand
	last time.Duration
}

func (a *latentAgent) Start(env emulator.Env) {
	a.env = env
	h := fnv.New64a()
	b, _ := env.Local().MarshalBinary()
	h.Write(b)
	h.Write([]byte("host latency"))
	a.rng = rand.New(rand.NewPCG(a.seed, h.Sum64()))
	a.Agent.Start(env)
}

func (a *latentAgent) Recv(from emulator.Addr, b []byte) {
	now := a.env.Now()
	at := max(now+a.h.draw(a.rng), a.last) // one receive path: no reordering
	a.last = at
	b = bytes.Clone(b) // Recv only borrows it; the agent sees it later
	a.env.After(at-now, func() { a.Agent.Recv(from, b) })
}
