// Package wireshark holds tracebed's Wireshark dissector (tracebed.lua), a
// Lua plugin that decodes the INA header (UDP port 48864) and the
// far-memory header (UDP ports 7470 and 7471) with every field named as in
// docs/ina-dataplane.md and docs/farmem.md. 'tracebed topo export --format
// wireshark' prints it; docs/netns.md says how to install it.
package wireshark

import _ "embed"

// Dissector is the Lua source of the dissector.
//
//go:embed tracebed.lua
var Dissector []byte

// File is the dissector's file name.
const File = "tracebed.lua"
