// Package netns brings a tracebed topology up on the real Linux network
// stack, in the way Mininet and containerlab do: one network namespace per
// host and per switch, one veth pair per link, addresses, routes and
// neighbour entries derived from the topology, and link rates shaped with tc
// HTB — all through netlink (vishvananda/netlink, vishvananda/netns and
// containernetworking/plugins' pkg/ns), never by running ip or tc.
//
// The switches' namespaces only get their ports: forwarding is the job of the
// Go switch (package emulator/switch, run as 'tracebed switch' inside the
// namespace) or, for a loop-free topology, of a Linux bridge (BridgeSwitches),
// which serves as the kernel baseline. Link propagation delay and injected
// loss are applied by the Go switch too (this kernel has no netem).
//
// Every object Up creates is named with the run's prefix ("tb-" and the run
// id), so Cleanup can find and remove what a killed run left behind.
//
// The package needs Linux. On other systems it holds only the naming of
// runs (NewRunID, TestRunID, ValidRunID) and RunTests, so that test
// binaries build everywhere; the commands that bring networks up say that
// they need Linux (see emulator.NeedsLinux).
package netns
