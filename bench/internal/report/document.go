package report

import (
	"fmt"
	"io"

	"github.com/backstophq/backstop/bench/internal/harness"
	"github.com/backstophq/backstop/bench/internal/scenario"
)

// Document is one benchmark run to report.
type Document struct {
	Runs    *harness.Runs
	Scale   scenario.Scale
	Rounds  int
	Seed    uint64
	Machine Machine
	Command string
}

// Write writes the report as Markdown to w.
func (d *Document) Write(w io.Writer) {
	for name, rs := range d.Runs.Results {
		for i, r := range rs {
			fmt.Fprintf(w, "%s round %d: %+v\n", name, i+1, r)
		}
	}
}
