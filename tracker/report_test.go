package tracker

import (
	"testing"
	"time"
)

func wantKeys(t *testing.T, rec map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := rec[k]; !ok {
			t.Errorf("record %v lacks key %q", rec["msg"], k)
		}
	}
}

func TestReportOnceAtFaultThresholdAndOnceOnRecovery(t *testing.T) {
	t.Parallel()
	c := newFake()
	var sink logSink
	var reports []Report
	tr := New(Config{Clock: c, Strategy: doubling{base: time.Second}, Name: "dest/a", Logger: sink.logger(),
		ReportAfterFaults: 3, OnReport: func(r Report) { reports = append(reports, r) }})

	tr.Fault()
	c.Advance(time.Second)
	tr.Fault()
	if n := len(sink.records(t, "WARN")); n != 0 {
		t.Fatalf("%d WARN records below the threshold", n)
	}
	if n := len(sink.records(t, "DEBUG")); n != 2 {
		t.Fatalf("%d DEBUG records, want one per fault below the threshold", n)
	}
	c.Advance(2 * time.Second)
	tok := tr.Fault() // third: crosses
	for range 7 {
		c.Advance(time.Minute)
		tr.Fault()
		tr.TryProceed()
	}
	warns := sink.records(t, "WARN")
	if len(warns) != 1 {
		t.Fatalf("%d WARN records, want exactly 1", len(warns))
	}
	w := warns[0]
	wantKeys(t, w, "tracker", "faults", "failing_for", "next_try")
	if w["msg"] != MsgThreshold || w["tracker"] != "dest/a" || w["faults"] != 3.0 ||
		w["failing_for"] != float64(3*time.Second) || w["next_try"] != tok.Deadline().Format(time.RFC3339Nano) {
		t.Fatalf("threshold record = %v", w)
	}

	c.Advance(time.Minute)
	tr.Success()
	tr.Success()
	warns = sink.records(t, "WARN")
	if len(warns) != 2 {
		t.Fatalf("%d WARN records after recovery, want 2", len(warns))
	}
	r := warns[1]
	wantKeys(t, r, "tracker", "faults", "failed_for")
	if r["msg"] != MsgRecovered || r["tracker"] != "dest/a" || r["faults"] != 10.0 ||
		r["failed_for"] != float64(3*time.Second+8*time.Minute) {
		t.Fatalf("recovery record = %v", r)
	}

	if len(reports) != 2 || reports[0].Event != EventThreshold || reports[1].Event != EventRecovered {
		t.Fatalf("OnReport got %+v", reports)
	}
	if got := reports[0]; got.Faults != 3 || !got.FailingSince.Equal(t0) || got.FailingFor != 3*time.Second ||
		got.Tracker != "dest/a" || !got.NextTry.Deadline().Equal(tok.Deadline()) {
		t.Fatalf("threshold report = %+v", got)
	}
	if got := reports[1]; got.Faults != 10 || !got.NextTry.Expired() {
		t.Fatalf("recovery report = %+v", got)
	}

	// A new failing stretch reports afresh.
	for range 3 {
		tr.Fault()
	}
	if n := len(sink.records(t, "WARN")); n != 3 {
		t.Fatalf("%d WARN records after a second stretch, want 3", n)
	}
}

func TestNoWarnWhenThresholdNeverCrossed(t *testing.T) {
	t.Parallel()
	c := newFake()
	var sink logSink
	called := false
	tr := New(Config{Clock: c, Logger: sink.logger(), OnReport: func(Report) { called = true }})
	for range DefaultReportAfterFaults - 1 {
		tr.Fault()
		c.Advance(time.Hour) // time alone reports nothing: duration is off by default
		tr.TryProceed()
	}
	tr.Success()
	if n := len(sink.records(t, "WARN")); n != 0 || called {
		t.Fatalf("%d WARN records (hook called: %v) for a stretch below the default threshold", n, called)
	}
	for range DefaultReportAfterFaults {
		tr.Fault()
	}
	if n := len(sink.records(t, "WARN")); n != 1 {
		t.Fatalf("%d WARN records at the default threshold, want 1", n)
	}
}

func TestReportAfterDuration(t *testing.T) {
	t.Parallel()
	c := newFake()
	var sink logSink
	tr := New(Config{Clock: c, Strategy: doubling{base: time.Second}, Logger: sink.logger(),
		ReportAfterFaults: -1, ReportAfterDuration: time.Minute})
	tr.Fault()
	c.Advance(time.Minute - time.Nanosecond)
	tr.TryProceed()
	if n := len(sink.records(t, "WARN")); n != 0 {
		t.Fatal("reported before the duration")
	}
	c.Advance(time.Nanosecond)
	tr.TryProceed() // the check happens here, between faults
	tr.TryProceed()
	tr.Fault()
	warns := sink.records(t, "WARN")
	if len(warns) != 1 {
		t.Fatalf("%d WARN records, want 1", len(warns))
	}
	if warns[0]["faults"] != 1.0 || warns[0]["failing_for"] != float64(time.Minute) {
		t.Fatalf("record = %v", warns[0])
	}
	for range 100 {
		tr.Fault() // count reporting is off
	}
	if n := len(sink.records(t, "WARN")); n != 1 {
		t.Fatalf("%d WARN records, want 1", n)
	}
}

func TestReportWhicheverComesFirst(t *testing.T) {
	t.Parallel()
	c := newFake()
	var sink logSink
	tr := New(Config{Clock: c, Strategy: doubling{base: time.Second}, Logger: sink.logger(),
		ReportAfterFaults: 3, ReportAfterDuration: time.Minute})
	tr.Fault()
	c.Advance(time.Hour)
	tr.Fault() // crosses by time, at the second fault
	tr.Fault() // would cross by count
	warns := sink.records(t, "WARN")
	if len(warns) != 1 || warns[0]["faults"] != 2.0 {
		t.Fatalf("WARN records = %v", warns)
	}
}

func TestReportNextTryNever(t *testing.T) {
	t.Parallel()
	var sink logSink
	tr := New(Config{Clock: newFake(), Strategy: doubling{base: time.Second, stopAfter: 1}, Logger: sink.logger(), ReportAfterFaults: 2})
	tr.Fault()
	tr.Fault()
	warns := sink.records(t, "WARN")
	if len(warns) != 1 || warns[0]["next_try"] != "never" {
		t.Fatalf("WARN records = %v", warns)
	}
}

func TestEventString(t *testing.T) {
	t.Parallel()
	if EventThreshold.String() != "threshold" || EventRecovered.String() != "recovered" || Event(9).String() != "event(9)" {
		t.Fatal("Event.String")
	}
}
