// Package goswitch (directory emulator/switch) is the Go switch: the
// software switch of tracebed's netns substrate, run as 'tracebed switch'
// inside a switch's network namespace.
//
// It runs the same Go pipelines as the sim substrate — the programs it is
// handed (Config.Programs, a dataplane.Registry: p4/'s, assembled by the
// command) — over real ports:
//
//   - ports receive through AF_XDP sockets fed by an XDP program on the
//     namespace's veth interfaces, read without a system call (xsk.go), and
//     send through AF_PACKET sockets with sendmmsg, a batch per system call;
//     where AF_XDP cannot be had a port is an AF_PACKET socket both ways,
//     read with recvmmsg (Config.IO);
//   - each egress port has strict-priority queues with a drop-tail limit of
//     the link's buffer, paced at the link's rate: a frame leaves when the
//     previous one has finished serializing, exactly as on sim;
//   - link propagation delay, loss, duplication and reordering are applied
//     by the switch (the kernel here has no netem): on egress for every
//     port, and also on ingress for ports facing a host, so both directions
//     of every link see them once;
//   - counters per port and per pipeline;
//   - a P4Runtime server (server.go) programs the pipeline.
//
// One goroutine, locked to an OS thread, runs the whole data plane: it
// polls the ports, runs the pipeline, paces the queues and executes
// control-plane calls between batches, so pipelines and devices need no
// locks (the p4rt.Device concurrency rule).
//
// The package needs Linux: on other systems it is empty, and
// the commands that use it say so (see emulator.NeedsLinux).
package goswitch
