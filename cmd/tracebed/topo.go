package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

func (a *app) topoCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topo",
		Short: "Generate, inspect and (as root) bring up topologies",
	}
	cmd.AddCommand(a.topoGenerateCommand(), a.topoShowCommand(), a.topoExportCommand())
	cmd.AddCommand(a.topoNetnsCommands()...)
	return cmd
}

func (a *app) topoGenerateCommand() *cobra.Command {
	var p topologies.Params
	var rate, fabric, buffer, delay string
	cmd := &cobra.Command{
		Use:   "generate {star|leafspine|fattree} [flags]",
		Short: "Print a generated topology as YAML",
		Example: "  tracebed topo generate star --hosts 32 --rate 100Gbps > star32.yaml\n" +
			"  tracebed topo generate leafspine --spines 4 --leaves 8 --hosts-per-leaf 16\n" +
			"  tracebed topo generate fattree --k 8 --aggregators 16384",
		Args:      cobra.ExactArgs(1),
		ValidArgs: topologies.Generators,
		RunE: func(cmd *cobra.Command, args []string) error {
			p.Generate = args[0]
			var err error
			if rate != "" {
				if p.Rate, err = units.ParseRate(rate); err != nil {
					return badInput(fmt.Errorf("--rate: %w", err))
				}
			}
			if fabric != "" {
				if p.FabricRate, err = units.ParseRate(fabric); err != nil {
					return badInput(fmt.Errorf("--fabric-rate: %w", err))
				}
			}
			if buffer != "" {
				b, err := units.ParseBytes(buffer)
				if err != nil {
					return badInput(fmt.Errorf("--buffer: %w", err))
				}
				p.Buffer = b
			}
			if delay != "" {
				d, err := units.ParseDuration(delay)
				if err != nil {
					return badInput(fmt.Errorf("--delay: %w", err))
				}
				p.Delay = units.Duration(d)
			}
			f, err := topologies.Generate(p)
			if err != nil {
				return badInput(fmt.Errorf("%s", strings.TrimPrefix(err.Error(), ": ")))
			}
			if _, err := f.Build("generated"); err != nil {
				return badInput(err)
			}
			_, err = a.stdout.Write(f.YAML())
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&p.Name, "name", "", "topology name (default: derived from the generator)")
	fl.IntVar(&p.Hosts, "hosts", 0, "star: number of hosts (default 8)")
	fl.IntVar(&p.Spines, "spines", 0, "leafspine: spine switches (default 2)")
	fl.IntVar(&p.Leaves, "leaves", 0, "leafspine: leaf switches (default 4)")
	fl.IntVar(&p.HostsPerLeaf, "hosts-per-leaf", 0, "leafspine: hosts under each leaf (default 4)")
	fl.IntVar(&p.K, "k", 0, "fattree: switch ports, even (default 4)")
	fl.StringVar(&rate, "rate", "", "host link rate (default 100Gbps)")
	fl.StringVar(&fabric, "fabric-rate", "", "switch-to-switch link rate (default: --rate)")
	fl.StringVar(&delay, "delay", "", "one-way propagation delay of every link (default 0)")
	fl.StringVar(&buffer, "buffer", "", "egress buffer per queue (default 1MiB)")
	fl.IntVar(&p.Aggregators, "aggregators", 0, "INA aggregator slots per switch")
	fl.IntVar(&p.Queues, "queues", 0, "egress priority queues per port (default 8)")
	return cmd
}

func (a *app) topoShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show TOPOLOGY",
		Short: "Describe a topology: nodes, addresses, ports and routes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			top, err := topologies.Open(args[0])
			if err != nil {
				return badInput(err)
			}
			fmt.Fprintln(a.stdout, top.Summary())
			routes := top.Routes()
			for _, n := range top.Nodes {
				fmt.Fprintf(a.stdout, "%-10s %-6s %-15s %s\n", n.Name, n.Kind, n.IP, n.MAC)
				for _, p := range n.Ports {
					fmt.Fprintf(a.stdout, "    port %-3d %-8s -> %-14s %v, %v delay, %v buffer\n", p.Num, p.Iface, p.Peer, p.Link.Rate, p.Link.Delay, p.Link.Buffer)
				}
				if !n.IsHost() {
					for _, h := range top.Hosts() {
						fmt.Fprintf(a.stdout, "    route %-15s via ports %v\n", h.IP, routes[n.Name][h.IP])
					}
				}
			}
			return nil
		},
	}
}

func (a *app) loadTopology(path string, data []byte) (*topologies.Topology, error) {
	return topologies.Parse(path, data)
}

// readTopologyArg loads a topology named on the command line: a file, or a
// topology built into the binary (star, leafspine, fattree-k4).
func readTopologyArg(arg string) (*topologies.Topology, []byte, error) {
	data, err := os.ReadFile(arg)
	if err != nil {
		if data, err = topologies.ReadyFile(arg); err != nil {
			return nil, nil, badInput(fmt.Errorf("topology %s: no such file, and not one of the built-in topologies %v", arg, topologies.ReadyFiles()))
		}
	}
	top, err := topologies.Parse(arg, data)
	if err != nil {
		return nil, nil, badInput(err)
	}
	return top, data, nil
}
