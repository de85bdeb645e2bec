package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tracebed/tracebed/analysis"
)

// Output formats of run, compare and report (--format).
const (
	formatTable    = "table"    // box-drawn tables for a terminal (tablewriter)
	formatMarkdown = "markdown" // GitHub-flavoured Markdown
	formatCSV      = "csv"
	formatJSON     = "json"
)

var formats = []string{formatTable, formatMarkdown, formatCSV, formatJSON}

// formatFlag is a --format flag value restricted to the known formats.
type formatFlag struct{ value string }

func (f *formatFlag) String() string { return f.value }
func (f *formatFlag) Type() string   { return "format" }
func (f *formatFlag) Set(s string) error {
	s = strings.ToLower(s)
	if s == "md" {
		s = formatMarkdown
	}
	if !slices.Contains(formats, s) {
		return fmt.Errorf("%q: want one of %s", s, strings.Join(formats, ", "))
	}
	f.value = s
	return nil
}

// addFormatFlag registers --format on fs with a default and what each
// format prints for this command.
func addFormatFlag(fs *pflag.FlagSet, def, help string) *formatFlag {
	f := &formatFlag{value: def}
	fs.VarP(f, "format", "f", help+" ("+strings.Join(formats, "|")+")")
	return f
}

// writeTables prints tables in a table, Markdown or CSV format.
func writeTables(w io.Writer, format string, tables []analysis.Table) error {
	switch format {
	case formatMarkdown:
		for _, t := range tables {
			if err := t.WriteMarkdown(w); err != nil {
				return err
			}
		}
		return nil
	case formatCSV:
		return analysis.WriteCSV(w, tables)
	}
	for _, t := range tables {
		if err := t.WriteText(w); err != nil {
			return err
		}
	}
	return nil
}
