package relay

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/backstophq/backstop/outbox"
)

// insertRaw writes outbox rows with plain SQL, as another program would:
// destinations the relay does not know, one of them not UTF-8 (SQLite
// keeps any bytes a text cast gives it).
func insertRaw(t *testing.T, e *env, destinations ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", e.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Since SQLite migration 0024 the outbox refuses a name that is not
	// UTF-8; such a row written before it stays, and is what these tests
	// are about.
	if _, err := db.Exec(`DROP TRIGGER backstop_outbox_check_names_utf8_insert`); err != nil {
		t.Fatal(err)
	}
	for _, d := range destinations {
		if _, err := db.Exec(`INSERT INTO backstop_outbox (destination, type, payload) VALUES (CAST(? AS TEXT), 't', '{}')`, []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
}

func seriesOf(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// A message for a destination the relay does not know, dead-lettered, is
// counted under destination "(unknown)": its own name came from a row
// anyone may write (one not UTF-8 made the client library panic on the
// recorder's goroutine and killed serve), and every such name was a
// series for ever.
func TestUnknownDestinationsAreCountedUnderOneLabel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	names := []string{"ord\xff"}
	for i := range 30 {
		names = append(names, fmt.Sprintf("nowhere-%d", i))
	}
	insertRaw(t, e, names...)
	reg := prometheus.NewRegistry()
	cfg := e.config(map[string]Destination{"orders": {Transport: (&recorder{}).transport()}})
	cfg.UnknownDestination, cfg.Metrics = DeadLetterUnknown, reg
	rn := e.start(cfg)
	rn.settle()
	if n := len(e.deadLetters()); n != len(names) {
		t.Fatalf("%d dead letters, want %d", n, len(names))
	}
	dead := seriesOf(t, reg, "backstop_dead_lettered_total")
	if len(dead) != 1 || labelOf(dead[0], "destination") != unknownDestinationLabel || dead[0].GetCounter().GetValue() != float64(len(names)) {
		t.Fatalf("dead_lettered_total series: %v", dead)
	}
}

// Left for another relay, unknown destinations are a gauge of at most
// maxUnknownSeries names and "(others)", every name valid UTF-8: one that
// was not failed every scrape.
func TestUnknownDestinationGaugeIsBoundedAndValid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	names := []string{"ord\xff", "ord\xff"} // the largest count: shown by name
	for i := range 30 {
		names = append(names, fmt.Sprintf("nowhere-%02d", i))
	}
	insertRaw(t, e, names...)
	reg := prometheus.NewRegistry()
	cfg := e.config(map[string]Destination{"orders": {Transport: (&recorder{}).transport()}})
	cfg.Metrics = reg
	rn := e.start(cfg)
	rn.settle()
	for range 4 {
		// turn, not advance: the clock moves once the maintainer waits for
		// its timer (moved before, under load, the beat that counts never
		// came)
		turn(e, rn.r.Config().HeartbeatInterval, rn)
	}
	rn.waitFor("the count", func() bool { return len(rn.r.Stats().UnknownPending) == 31 })
	series := seriesOf(t, reg, "backstop_unknown_destination_messages")
	if len(series) != maxUnknownSeries+1 {
		t.Fatalf("%d series, want %d", len(series), maxUnknownSeries+1)
	}
	total, named := 0.0, map[string]float64{}
	for _, m := range series {
		total += m.GetGauge().GetValue()
		named[labelOf(m, "destination")] = m.GetGauge().GetValue()
	}
	if total != float64(len(names)) || named["ord\uFFFD"] != 2 || named["(others)"] != 11 {
		t.Fatalf("series %v (total %v)", named, total)
	}
	if n, more := len(e.logs.find("messages for a destination this relay does not know")), e.logs.find("more destinations"); n != maxUnknownWarnings || len(more) != 1 || more[0].attrs["destinations"] != "11" {
		t.Errorf("warnings: %d by name, summaries %v; want %d by name and one of the 11 others", n, more, maxUnknownWarnings)
	}
}

// A destination name no message can carry (invalid UTF-8, a control
// character, over the longest destination a store takes) is refused by
// New, naming it: one not UTF-8 made New panic in the metrics' client
// (its label), and the others were accepted for a destination that could
// never get a message.
func TestNewRefusesADestinationNameNoMessageCanCarry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, name := range []string{"orders\xff", "orders\n", "orders\x1b[31m", strings.Repeat("d", outbox.MaxLimits.MaxDestinationLen+1)} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("New with destination %q panicked: %v", name, p)
				}
			}()
			cfg := e.config(map[string]Destination{name: {Transport: (&recorder{}).transport()}})
			cfg.Metrics = prometheus.NewRegistry()
			_, err := New(e.s, cfg)
			if err == nil || !strings.Contains(err.Error(), "relay: Destinations[") {
				t.Errorf("New with destination %q: %v, want an error naming Destinations", name, err)
			}
		}()
	}
}

// Rows for many destinations the relay does not know (written by plain
// SQL, or by a misconfigured writer) are warned about by name for the
// first maxUnknownWarnings only, then in one record that counts the
// others: every name had its own warning, 100 names 100 records at once,
// as many as rows anyone may write.
func TestManyUnknownDestinationsAreWarnedAboutBoundedly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db, err := sql.Open("sqlite", e.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	const names = 100
	for i := range names {
		if _, err := tx.Exec(`INSERT INTO backstop_outbox (destination, type, payload) VALUES (?, 't', '{}')`, fmt.Sprintf("nowhere-%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(map[string]Destination{"orders": {Transport: (&recorder{}).transport()}})
	rn := e.start(cfg)
	rn.settle()
	for range 4 {
		turn(e, rn.r.Config().HeartbeatInterval, rn)
	}
	rn.waitFor("the count", func() bool { return len(rn.r.Stats().UnknownPending) == names })
	named := e.logs.find("messages for a destination this relay does not know")
	more := e.logs.find("more destinations this relay does not know")
	if len(named) != maxUnknownWarnings || len(more) != 1 || more[0].attrs["destinations"] != fmt.Sprint(names-maxUnknownWarnings) {
		t.Fatalf("%d warnings by name (want %d), summaries %v (want one of %d destinations)", len(named), maxUnknownWarnings, more, names-maxUnknownWarnings)
	}
	for range 4 { // the next count warns about nothing new
		turn(e, rn.r.Config().HeartbeatInterval, rn)
	}
	if n, m := len(e.logs.find("messages for a destination this relay does not know")), len(e.logs.find("more destinations this relay does not know")); n != maxUnknownWarnings || m != 1 {
		t.Fatalf("after another count: %d warnings by name, %d summaries", n, m)
	}
}
