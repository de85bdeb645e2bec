// Package crossval holds tests only: they run the ready netns specs on
// networks built two ways — by tracebed itself (package emulator/netns)
// and by Mininet with tracebed's classes (package emulator/netns/mininet,
// 'tracebed run --network mininet') — and check that the policies rank the
// same and that each policy's headline metric agrees within 10%. They need
// root and Mininet and skip, saying so, otherwise.
package crossval
