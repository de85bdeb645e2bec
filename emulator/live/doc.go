// Package live runs tracebed's sans-IO agents for real: on UDP sockets, with
// the wall clock. It is the agent runtime of the netns substrate, and works
// in any network namespace: the caller opens each socket where it belongs
// (for example inside a host's namespace) and hands it to Attach.
//
// Every agent gets its own event loop, a goroutine that runs the agent's
// callbacks one at a time — Start, Recv for each datagram, timer functions
// and functions posted with Post — so agents need no locks, exactly as on
// the sim substrate. A reader goroutine per socket receives datagrams in
// batches (recvmmsg) and queues them to the loop.
//
// The package needs Linux: on other systems it is empty, and
// the commands that use it say so (see emulator.NeedsLinux).
package live
