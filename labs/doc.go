// Package labs holds laboratory exercises built on tracebed, each in its
// own directory with a handout (README.md), the answers for instructors
// (ANSWERS.md) and its topologies and specs:
//
//   - 1-watch-an-aggregate: capture a ToR port, find a worker's
//     contribution, the aggregate and its multicast in Wireshark.
//   - 2-switch-memory: predict and measure how a job's pool of aggregators
//     sets its all-reduce time; memory against job completion time for a
//     cluster.
//   - 3-your-own-policy: change an INA scheduling policy in its one file
//     (systems/mine) and compare it with DynaINA, with paired statistics.
//   - 4-noisy-neighbour: Fastswap and Glitter next to a bulk tenant; read
//     the blocking events.
//
// The tests of this package run each handout's commands with a freshly
// built tracebed and check what the handout promises the student will see
// (the parts on real networks as root).
package labs
