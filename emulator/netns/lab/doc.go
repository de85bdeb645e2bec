// Package lab runs topologies for hands-on work, as Mininet does for its
// users: Up brings a topology up on network namespaces with a switch
// process per topology switch (the Go switch, bmv2's simple_switch_grpc or
// Linux bridges) and records the run in its directory; Attach finds a run
// that another process brought up ('tracebed topo up', 'tracebed mininet',
// or a Mininet script exported by 'tracebed topo export --format mininet');
// a Run then runs commands in nodes (Exec), checks all-pairs reachability
// (PingAll), takes links down and up (Link), captures a port (Capture),
// reads a switch's counters over P4Runtime (Counters), watches its switch
// processes (Status, Watch) and tears it down (Down). Shell is the
// interactive command interpreter of 'tracebed topo cli' on top of it.
//
// A run id in use is never touched by another run: Up claims it before it
// creates anything (netns.Claim). A switch process that dies is reported —
// by Watch as it happens and by Status — and its log is kept in KeptLogDir
// when the run goes down.
//
// The package needs Linux: on other systems it is empty, and
// the commands that use it say so (see emulator.NeedsLinux).
package lab
