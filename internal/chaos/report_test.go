package chaos

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// size is how much chaos a run makes: small under `go test`, full under
// `make chaos` (BACKSTOP_CHAOS=full).
type size struct {
	name         string
	load         load          // on PostgreSQL
	sqliteLoad   load          // on SQLite: one writer at a time, shared by the load and the relay
	kills        int           // SIGKILLs mid-batch (PostgreSQL)
	stops        int           // SIGSTOPs past the lease
	clockSteps   int           // steps forward of the database's clock past the lease
	pgRestarts   int           // rounds of terminated connections
	pgDown       time.Duration // how long each round keeps terminating them
	crashes      int           // crashes of a private PostgreSQL (TestChaosPostgresCrash)
	crashDown    time.Duration // how long it stays down after each
	crashAfter   int           // deliveries of steady load before each crash
	crashLong    time.Duration // when not 0, one more crash down this long: past the instance timeout
	destDown     time.Duration // each of: 503s, refused connections
	flap         time.Duration // how long the destination flaps
	flapEvery    time.Duration // and how often it changes its mind
	poison       int           // poison messages (half replayed, half released)
	sqliteKills  int           // SIGKILLs of the SQLite relay
	recoverLimit time.Duration // the longest a recovery may take before the test gives up on it
}

func chaosSize() size {
	if os.Getenv("BACKSTOP_CHAOS") == "full" {
		return size{
			name:       "full",
			load:       load{streams: 500, every: 25 * time.Millisecond, perTx: 3, burstN: 200, burstAt: 80, maxBacklog: 5000},
			sqliteLoad: load{streams: 200, every: 40 * time.Millisecond, perTx: 2, burstN: 100, burstAt: 50, maxBacklog: 500},
			kills:      6, stops: 2, clockSteps: 2, pgRestarts: 2, pgDown: 3 * time.Second, crashes: 3, crashDown: 3 * time.Second, crashAfter: 3000, crashLong: instanceTimeout + 2*time.Second,
			destDown: 5 * time.Second, flap: 8 * time.Second, flapEvery: 300 * time.Millisecond,
			poison: 10, sqliteKills: 8, recoverLimit: 90 * time.Second,
		}
	}
	return size{
		name:       "small",
		load:       load{streams: 200, every: 25 * time.Millisecond, perTx: 3, burstN: 100, burstAt: 40, maxBacklog: 3000},
		sqliteLoad: load{streams: 100, every: 50 * time.Millisecond, perTx: 2, burstN: 50, burstAt: 40, maxBacklog: 300},
		kills:      2, stops: 1, clockSteps: 1, pgRestarts: 1, pgDown: time.Second, crashes: 1, crashDown: 1500 * time.Millisecond, crashAfter: 600,
		destDown: 2500 * time.Millisecond, flap: 2 * time.Second, flapEvery: 250 * time.Millisecond,
		poison: 4, sqliteKills: 2, recoverLimit: 30 * time.Second,
	}
}

// phase is one fault, or the calm before them.
type phase struct {
	name     string
	start    time.Time
	end      time.Time     // the fault ended (the kill, SIGCONT, the destination back)
	recovery time.Duration // from end until everything committed before end arrived
	failed   string        // why recovery was not reached, if it was not
	note     string
	backlog  int // undelivered messages in the outbox when the fault ended
	dups     int
	stale    int
	// noDups says the phase's fault must cause no duplicate: every relay
	// still holding its leases, nothing may be delivered twice.
	noDups   bool
	dupNotes []string // the duplicates that arrived in it (verdict.DupNotes)
}

// report gathers a run's figures.
type report struct {
	title  string
	phases []*phase
	v      verdict
	extra  [][2]string // name, value
	// checked says the verdict was computed at the end of the run.
	checked bool
	// stopped are the instances that were SIGSTOPped.
	stopped map[string]bool
}

func (r *report) add(p *phase) { r.phases = append(r.phases, p) }

func (r *report) fact(name, format string, args ...any) {
	r.extra = append(r.extra, [2]string{name, fmt.Sprintf(format, args...)})
}

// attribute charges each duplicate and stale re-send to the phase in which
// it arrived.
func (r *report) attribute() {
	at := func(ts time.Time) *phase {
		var p *phase
		for _, ph := range r.phases {
			if !ph.start.After(ts) {
				p = ph
			}
		}
		return p
	}
	for i, ts := range r.v.DupAt {
		if p := at(ts); p != nil {
			p.dups++
			p.dupNotes = append(p.dupNotes, r.v.DupNotes[i])
		}
	}
	for _, ts := range r.v.StaleAt {
		if p := at(ts); p != nil {
			p.stale++
		}
	}
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// undelivered counts the outbox's messages neither delivered nor
// dead-lettered, or -1 when the query fails.
func undelivered(ctx context.Context, q func(ctx context.Context, sql string) (int, error), table string) int {
	n, err := q(ctx, `SELECT count(*) FROM `+table+` WHERE published_at IS NULL AND dead_lettered_at IS NULL`)
	if err != nil {
		return -1
	}
	return n
}

// String renders the report as Markdown tables.
func (r *report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## %s\n\n", r.title)
	b.WriteString("| fault | lasted | backlog at its end | recovery | duplicates | stale re-sends | note |\n|---|---|---|---|---|---|---|\n")
	for _, p := range r.phases {
		rec := ms(p.recovery)
		if p.failed != "" {
			rec = "NOT RECOVERED: " + p.failed
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %d | %d | %s |\n", p.name, ms(p.end.Sub(p.start)), p.backlog, rec, p.dups, p.stale, p.note)
	}
	v := r.v
	b.WriteString("\n| check | value |\n|---|---|\n")
	rows := [][2]string{
		{"messages committed", fmt.Sprint(v.Committed)},
		{"expected (committed minus released poison)", fmt.Sprint(v.Expected)},
		{"arrivals accepted", fmt.Sprint(v.Arrived)},
		{"**lost**", fmt.Sprint(v.Lost)},
		{"**order violations**", fmt.Sprint(v.OrderViolations)},
		{"duplicates", fmt.Sprint(v.Duplicates)},
		{"stale re-sends (a duplicate after a later message of its stream)", fmt.Sprint(v.Stale)},
		{"stale re-sends by sender", r.staleBy()},
		{"phantoms (never committed)", fmt.Sprint(v.Phantom)},
	}
	for _, row := range append(rows, r.extra...) {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}
	return b.String()
}

// staleBy lists the senders of stale re-sends, saying which were
// SIGSTOPped before.
func (r *report) staleBy() string {
	if len(r.v.StaleBy) == 0 {
		return "-"
	}
	var parts []string
	for _, id := range sortedKeys(r.v.StaleBy) {
		part := fmt.Sprintf("%s %d", id, r.v.StaleBy[id])
		if r.stopped[id] {
			part += " (it had been SIGSTOPped)"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// finish computes the verdict, if finalChecks did not, and publishes the
// report: deferred, so that a run that fails half-way still reports.
func (r *report) finish(t *testing.T, l *ledger) {
	if !r.checked {
		r.v = l.check()
		r.attribute()
		r.title += " (INCOMPLETE: the run failed before its end)"
	}
	r.publish(t)
}

// publish logs the report and, when BACKSTOP_CHAOS_REPORT names a file,
// appends it there (make chaos prints that file).
func (r *report) publish(t *testing.T) {
	s := r.String()
	t.Log(s)
	appendReport(t, s)
}

// appendReport appends s to the file BACKSTOP_CHAOS_REPORT names, if any
// (make chaos prints that file).
func appendReport(t *testing.T, s string) {
	if path := os.Getenv("BACKSTOP_CHAOS_REPORT"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Errorf("report: %v", err)
			return
		}
		defer f.Close()
		_, _ = f.WriteString(s)
	}
}

// publishSection logs a table of facts under title and, as publish does,
// appends it to BACKSTOP_CHAOS_REPORT when that names a file.
func publishSection(t *testing.T, title string, facts [][2]string) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## %s\n\n| check | value |\n|---|---|\n", title)
	for _, f := range facts {
		fmt.Fprintf(&b, "| %s | %s |\n", f[0], f[1])
	}
	t.Log(b.String())
	appendReport(t, b.String())
}
