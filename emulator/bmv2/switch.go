package bmv2

import (
	"fmt"
	"strconv"

	"github.com/tracebed/tracebed/topologies"
)

// SwitchArgs is simple_switch_grpc's command line for switch sw: device
// id, one -i PORT@IFACE per port with the topology's port numbers (IFACE
// the port's link stage, StageIface, or with opts.DirectLinks its link's
// interface), its log
// on the console (Start sends it to a file), no program until a controller pushes one (--no-p4), then, after
// "--", the target options: the P4Runtime server on a Unix socket (the
// controller runs in another namespace, where the switch's loopback is out
// of reach), the CPU port and the priority queues if asked for.
func SwitchArgs(sw *topologies.Node, socket string, opts Options) []string {
	args := []string{"--device-id", strconv.Itoa(DeviceID)}
	for _, p := range sw.Ports {
		iface := StageIface(p.Num)
		if opts.DirectLinks {
			iface = p.Iface
		}
		args = append(args, "-i", fmt.Sprintf("%d@%s", p.Num, iface))
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
	if !opts.SingleQueue && sw.Queues > 1 {
		args = append(args, "--priority-queues", strconv.Itoa(sw.Queues))
	}
	return args
}

// StageIface is the interface simple_switch_grpc attaches to as port num
// when the port has a link stage (StartStages): one end of a veth pair
// inside the switch's namespace whose other end the stage forwards to and
// from the port's link.
func StageIface(num int) string { return fmt.Sprintf("bmv%d", num) }
