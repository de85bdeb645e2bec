// Package crossval holds tests only: they run the ready netns specs two
// ways and check that the policies rank the same and that each policy's
// headline metric agrees — on networks built by tracebed itself (package
// emulator/netns) and by Mininet with tracebed's classes (package
// emulator/netns/mininet, 'tracebed run --network mininet'), within 10%;
// and with the Go switch and with bmv2's simple_switch_grpc running the P4
// programs ('tracebed run --switch bmv2'), within 15%. They need root and
// Mininet or bmv2 and p4c, and skip, saying so, otherwise.
package crossval
