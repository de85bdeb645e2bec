// Package switchcmd is the Go switch as a process: the 'tracebed switch'
// command, which runs one switch of a topology inside that switch's network
// namespace with a P4Runtime server, and Start, which starts one such
// process per switch of a network brought up by package emulator/netns
// ('tracebed topo up' and the netns testbed both use it).
//
// The processes are started from the running executable with the
// arguments of the 'switch' command and ChildEnv set. The tracebed binary
// runs the command as any other; a test binary that starts switches (it
// brings a testbed up) calls Main first thing in its TestMain, so that it
// acts as the switch when started as one.
//
// The package needs Linux. On other systems Main returns at once, so that
// test binaries build everywhere, and 'tracebed switch' says that it needs
// Linux (see emulator.NeedsLinux).
package switchcmd
