package storetest

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// BadCircuit is a circuits row written with plain SQL that holds a value
// the store cannot use as it is (Poison.BadCircuits).
type BadCircuit struct {
	// Name names the case.
	Name string
	// SQL inserts the row, open: {prefix} is the table prefix, {dest} the
	// destination, such as
	//	INSERT INTO {prefix}circuits (destination, open, next_probe) VALUES ('{dest}', true, 'infinity')
	SQL string
	// Column is the column the store's warning must name; empty when the
	// value is used as it is, within bounds, with no warning.
	Column string
	// Skipped says the row names no destination and is left out of
	// Circuits; otherwise its circuit is read, open, with the bad value as
	// NULL (a time) or zero (the interval).
	Skipped bool
	// Value, when set, is how the warning must show the bad value; it
	// tells apart the warnings of rows skipped, which name no destination.
	Value string
}

// logBuffer is a log that tests read while stores write to it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testBadCircuits writes every bad circuits row next to a circuit the
// fleet opened: the fleet's circuit still reads as it was set, each bad row
// is read past with one warning that names it, and its probe token can be
// taken. Reading the circuits failed on the first bad row: every relay
// then stopped matching its gates to the fleet, for every destination.
func testBadCircuits(t *testing.T, h Harness) {
	if h.Poison == nil || h.Poison.Exec == nil || len(h.Poison.BadCircuits) == 0 {
		t.Skip("Harness.Poison.BadCircuits not set")
	}
	logs := &logBuffer{}
	e := newEnv(t, h, func(c *store.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	f := fleetOf(t, e)
	if _, err := f.OpenCircuit(e.ctx, "good", "relay-a", time.Second); err != nil {
		t.Fatal(err)
	}
	dest := func(i int) string { return "bad-" + string(rune('a'+i)) }
	for i, r := range h.Poison.BadCircuits {
		if err := h.Poison.Exec(t, e.s, strings.ReplaceAll(r.SQL, "{dest}", dest(i))); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
	}
	for range 2 {
		good := e.circuit(f, "good")
		if !good.Open || good.OpenedBy != "relay-a" || !good.NextProbe.Equal(epoch.Add(time.Second)) || good.ProbeDue {
			t.Fatalf("the fleet's circuit next to the bad rows = %+v", good)
		}
	}
	cs, err := f.Circuits(e.ctx)
	noErr(t, "Circuits", err)
	byName := map[string]store.Circuit{}
	for _, c := range cs {
		if _, twice := byName[c.Destination]; twice {
			t.Errorf("two circuits read for %q: %+v and %+v", c.Destination, byName[c.Destination], c)
		}
		byName[c.Destination] = c
	}
	out := logs.String()
	for i, r := range h.Poison.BadCircuits {
		c, read := byName[dest(i)]
		switch {
		case r.Skipped && read:
			t.Errorf("%s: read as %+v; want it skipped", r.Name, c)
		case !r.Skipped && (!read || !c.Open || !c.ProbeDue || c.ProbeInterval < 0):
			t.Errorf("%s: read as %+v (found %v); want open, a probe due, an interval not negative", r.Name, c, read)
		}
		if n := warningsFor(out, r, dest(i)); r.Column != "" && n != 1 {
			t.Errorf("%s: %d warnings name it and column %s over three readings; want 1\n%s", r.Name, n, r.Column, out)
		}
		if r.Skipped {
			continue
		}
		took, err := f.TakeProbe(e.ctx, dest(i), "relay-b", 5*time.Second)
		if err != nil || !took {
			t.Errorf("%s: TakeProbe = %v, %v; want its due probe taken", r.Name, took, err)
		}
		if c := e.circuit(f, dest(i)); c.ProbeInterval > 5*time.Second || c.ProbeDue {
			t.Errorf("%s: after its probe was taken: %+v", r.Name, c)
		}
		if err := f.PauseDestination(e.ctx, dest(i), 10*time.Second); err != nil {
			t.Errorf("%s: PauseDestination: %v", r.Name, err)
		}
		if c := e.circuit(f, dest(i)); !c.Paused || !c.PausedUntil.Equal(epoch.Add(10*time.Second)) {
			t.Errorf("%s: a pause of 10 s = %+v, want it holding", r.Name, c)
		}
	}
}

// warningsFor counts the warnings of log that name r's column and, unless
// r has none, its destination.
func warningsFor(log string, r BadCircuit, dest string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "column "+r.Column+":") ||
			!strings.Contains(line, r.Value) {
			continue
		}
		if r.Skipped || strings.Contains(line, "destination="+dest) {
			n++
		}
	}
	return n
}
