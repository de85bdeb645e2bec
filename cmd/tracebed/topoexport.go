package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/emulator/netns/mininet"
	"github.com/tracebed/tracebed/wireshark"
)

// topoExportCommand is 'topo export': a topology as a Mininet script, or
// the Wireshark dissector. It works on every system.
func (a *app) topoExportCommand() *cobra.Command {
	var format, out string
	var helper bool
	cmd := &cobra.Command{
		Use:   "export --format mininet TOPOLOGY [-o FILE.py] | --format wireshark",
		Short: "Write a topology as a Mininet Python script; print the Wireshark dissector",
		Long: `Write a topology as a Mininet script: a Topo with the topology's addresses,
MACs, port numbers and interface names, the routes and static neighbours
'tracebed topo up' installs and TCLink bandwidth, brought up with tracebed's
Mininet classes (tracebed_mininet.py): TracebedSwitch runs the Go switch
('tracebed switch') in each switch's namespace with P4Runtime on a Unix
socket, BMv2Switch runs simple_switch_grpc. With -o FILE.py the script and
tracebed_mininet.py are written to FILE.py's directory; otherwise the script
goes to standard output (--helper prints tracebed_mininet.py instead).

Run it with 'sudo python3 FILE.py' (Mininet's CLI), 'sudo python3 FILE.py
--test pingall', or let tracebed run it: 'sudo tracebed mininet TOPOLOGY'.

--format wireshark prints tracebed's Wireshark dissector (Lua) for the INA
and far-memory headers: save it in Wireshark's personal plugin folder.`,
		Example: "  tracebed topo export --format mininet leafspine -o leafspine.py && sudo python3 leafspine.py --test pingall\n" +
			"  tracebed topo export --format mininet --helper > tracebed_mininet.py\n" +
			"  tracebed topo export --format wireshark > ~/.local/lib/wireshark/plugins/tracebed.lua",
		Args: func(cmd *cobra.Command, args []string) error {
			if helper || format == "wireshark" {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch format {
			case "mininet":
			case "wireshark":
				_, err := a.stdout.Write(wireshark.Dissector)
				return err
			default:
				return badInput(fmt.Errorf("--format %q: want mininet or wireshark", format))
			}
			if helper {
				_, err := a.stdout.Write(mininet.Helper)
				return err
			}
			top, _, err := readTopologyArg(args[0])
			if err != nil {
				return err
			}
			script := mininet.Export(top)
			if out == "" {
				_, err := a.stdout.Write(script)
				return err
			}
			if err := os.WriteFile(out, script, 0o755); err != nil {
				return err
			}
			h := filepath.Join(filepath.Dir(out), mininet.HelperFile)
			if err := os.WriteFile(h, mininet.Helper, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "wrote %s and %s; run: sudo python3 %s --test pingall\n", out, h, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "mininet", "what to write: mininet (a Mininet Python script) or wireshark (the Lua dissector)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the script to this file and tracebed_mininet.py beside it")
	cmd.Flags().BoolVar(&helper, "helper", false, "print tracebed_mininet.py, the module scripts import")
	return cmd
}
