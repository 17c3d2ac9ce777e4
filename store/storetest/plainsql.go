package storetest

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// Rows another language writes with plain SQL, valid by the outbox's
// contract, that every store must read and deliver as it does its own
// (Poison.Exec writes them): an id spelled in upper case, a lease without
// an expiry, integers outside 32 bits.
var plainSQLCases = []testCase{
	{"UpperCaseIDIsTheSameMessage", testUpperCaseID},
	{"LeaseWithoutExpiryIsRefused", testLeaseWithoutExpiry},
	{"IntegersOutside32BitsAreRefused", testIntegerRanges},
	{"AttemptsStopAtTheLargest32BitInteger", testAttemptsSaturate},
}

// testUpperCaseID: an id written in upper case (as .NET spells a Guid) is
// the id in any case, as PostgreSQL's uuid type has it: the message is
// found, failed and completed by it, and the same id in another spelling
// is a duplicate.
func testUpperCaseID(t *testing.T, h Harness) {
	p := needPoison(t, h)
	e := newEnv(t, h)
	id := uuid.New()
	insert := func(spelling string) error {
		return p.Exec(t, e.s, `INSERT INTO {prefix}outbox (id, destination, stream, type) VALUES ('`+spelling+`', 'd', 's', 'test.event')`)
	}
	noErr(t, "INSERT with an upper-case id", insert(strings.ToUpper(id.String())))
	for _, dup := range []string{id.String(), strings.ToUpper(id.String()[:18]) + id.String()[18:]} {
		if err := insert(dup); err == nil {
			t.Errorf("INSERT of %s, the id already written in upper case, was accepted", dup)
		}
	}
	later := e.enqueue(msg("d", "s"))[0]
	eq(t, "Get by the id", e.get(id).ID, id)
	got := e.claim("relay", 1)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("claimed %s, want %s", label(got), id)
	}
	res := e.fail("relay", store.Failure{ID: id})
	eq(t, "stale failures", len(res.Stale), 0)
	eq(t, "attempts after the failure", e.get(id).Attempts, 1)
	e.claimExactly("relay", 10) // the failed head holds its strict stream
	e.clk.Advance(time.Hour)
	got = e.claim("relay", 1)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("claimed %s after the retry delay, want %s", label(got), id)
	}
	e.complete("relay", outbox.StatusPublished, id)
	e.mustBeGone(id)
	e.claimExactly("relay", 10, later)
}

// testLeaseWithoutExpiry: instance_id without lease_expiry is refused on
// insert and on update; such a row was never claimed when unordered.
func testLeaseWithoutExpiry(t *testing.T, h Harness) {
	p := needPoison(t, h)
	e := newEnv(t, h)
	for _, stream := range []string{"", "s"} {
		if err := p.Exec(t, e.s, `INSERT INTO {prefix}outbox (destination, stream, type, instance_id)
			VALUES ('d', '`+stream+`', 'test.event', 'ghost')`); err == nil {
			t.Errorf("stream %q: INSERT with instance_id and no lease_expiry was accepted", stream)
		}
	}
	m := e.enqueue(msg("d", ""), msg("d", "s"))
	if err := p.Exec(t, e.s, `UPDATE {prefix}outbox SET instance_id = 'ghost'`); err == nil {
		t.Error("UPDATE setting instance_id alone was accepted")
	}
	e.claimExactly("relay", 10, m...)
	if err := p.Exec(t, e.s, `UPDATE {prefix}outbox SET lease_expiry = NULL`); err == nil {
		t.Error("UPDATE clearing lease_expiry of a leased message was accepted")
	}
	e.clk.Advance(time.Minute)
	e.claimExactly("other", 10, m...)
}

// testIntegerRanges: attempts and failure_reason are 32-bit integers; a
// value the store could not read back is refused.
func testIntegerRanges(t *testing.T, h Harness) {
	p := needPoison(t, h)
	e := newEnv(t, h)
	for _, c := range []struct{ col, val string }{
		{"attempts", "2147483648"},
		{"attempts", "3000000000"},
		{"failure_reason", "2147483648"},
		{"failure_reason", "-2147483649"},
		{"failure_reason", "1099511627776"},
	} {
		if err := p.Exec(t, e.s, `INSERT INTO {prefix}outbox (destination, type, `+c.col+`)
			VALUES ('d', 'test.event', `+c.val+`)`); err == nil {
			t.Errorf("INSERT of %s %s was accepted", c.col, c.val)
		}
	}
	m := e.enqueue(msg("d", ""))[0]
	for _, c := range []struct{ col, val string }{{"attempts", "2147483648"}, {"failure_reason", "-2147483649"}} {
		if err := p.Exec(t, e.s, `UPDATE {prefix}outbox SET `+c.col+` = `+c.val); err == nil {
			t.Errorf("UPDATE of %s to %s was accepted", c.col, c.val)
		}
	}
	if err := p.Exec(t, e.s, `INSERT INTO {prefix}outbox (destination, type, attempts, failure_reason)
		VALUES ('d', 'test.event', 2147483647, -2147483648)`); err != nil {
		t.Errorf("INSERT of the extremes of the range: %v", err)
	}
	got := e.claim("relay", 10)
	if len(got) != 2 || got[0].ID != m.ID || got[1].Attempts != math.MaxInt32 || got[1].FailureReason != math.MinInt32 {
		t.Fatalf("claimed %+v, want %s and the extremes", got, m.ID)
	}
}

// testAttemptsSaturate: a failure of a message whose attempts are already
// the largest 32-bit integer (written by plain SQL) is recorded, the count
// staying there, rather than refused for ever.
func testAttemptsSaturate(t *testing.T, h Harness) {
	p := needPoison(t, h)
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	id := uuid.New()
	noErr(t, "INSERT", p.Exec(t, e.s, `INSERT INTO {prefix}outbox (id, destination, type, attempts)
		VALUES ('`+id.String()+`', 'd', 'test.event', 2147483647)`))
	got := e.claim("relay", 10)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("claimed %s, want %s", label(got), id)
	}
	res := e.fail("relay", store.Failure{ID: id})
	eq(t, "rejected", len(res.Rejected), 0)
	eq(t, "dead-lettered (attempts past MaxAttempts)", len(res.DeadLettered), 1)
	eq(t, "attempts", e.get(id).Attempts, math.MaxInt32)
}
