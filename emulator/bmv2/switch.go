package bmv2

import (
	"fmt"
	"strconv"

	"github.com/tracebed/tracebed/topologies"
)

// SwitchArgs is simple_switch_grpc's command line for switch sw: device
// id, one -i PORT@IFACE per port with the topology's port numbers, its log
// on the console (Start sends it to a file), no program until a controller pushes one (--no-p4), then, after
// "--", the target options: the P4Runtime server on a Unix socket (the
// controller runs in another namespace, where the switch's loopback is out
// of reach), the CPU port and the priority queues if asked for.
func SwitchArgs(sw *topologies.Node, socket string, opts Options) []string {
	args := []string{"--device-id", strconv.Itoa(DeviceID)}
	for _, p := range sw.Ports {
		args = append(args, "-i", fmt.Sprintf("%d@%s", p.Num, p.Iface))
	}
	level := opts.LogLevel
	if level == "" {
		level = "warn"
	}
	args = append(args, "--log-console", "--log-level", level, "--no-p4",
		"--", "--grpc-server-addr", "unix:"+socket)
	if opts.CPUPort > 0 {
		args = append(args, "--cpu-port", strconv.Itoa(opts.CPUPort))
	}
	if opts.PriorityQueues && sw.Queues > 1 {
		args = append(args, "--priority-queues", strconv.Itoa(sw.Queues))
	}
	return args
}
