package errorhandling_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
)

// FuzzFingerprint feeds error messages as destinations and drivers write
// them (response bodies end up in errors): NormalizeMessage and
// Fingerprint never fail, a fingerprint is 16 hex digits, and two
// messages that differ only in a number standing alone share their
// fingerprint, as Fingerprint promises.
func FuzzFingerprint(f *testing.F) {
	for _, s := range [][2]string{
		{"dial tcp 127.0.0.1:54321: connect:", "connection refused"},
		{`webhook: POST https://h/x: 503 Service Unavailable: "retry in`, `s"`},
		{"order 0195a3b2-4c5d-7e6f-8a9b-0c1d2e3f4a5b failed after", "tries"},
		{"[::1]:8080 said", "at 2024-05-01T12:00:00Z"},
		{"\x00\xff\xfe", "\u202e"},
		{`"unterminated \`, `tail"`},
		{"timeout after", "ms (0xdeadbeef)"},
		{"", ""},
	} {
		f.Add(s[0], s[1], uint64(42), uint64(7))
	}
	f.Fuzz(func(t *testing.T, prefix, suffix string, a, b uint64) {
		ea := errors.New(prefix + " " + strconv.FormatUint(a, 10) + " " + suffix)
		eb := errors.New(prefix + " " + strconv.FormatUint(b, 10) + " " + suffix)
		fa, fb := errorhandling.Fingerprint(ea), errorhandling.Fingerprint(eb)
		if len(fa) != 16 {
			t.Fatalf("Fingerprint(%q) = %q, want 16 hex digits", ea, fa)
		}
		for _, c := range fa {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				t.Fatalf("Fingerprint(%q) = %q, want lower-case hex", ea, fa)
			}
		}
		if fa != fb {
			t.Fatalf("%q and %q differ only in a number but have fingerprints %s and %s (normalised %q and %q)",
				ea, eb, fa, fb, errorhandling.NormalizeMessage(ea.Error()), errorhandling.NormalizeMessage(eb.Error()))
		}
		if again := errorhandling.Fingerprint(errorhandling.Permanent(ea)); again != fa {
			t.Fatalf("Permanent changed the fingerprint of %q: %s, want %s", ea, again, fa)
		}
		_ = errorhandling.NormalizeMessage(prefix + suffix)
	})
}

// FuzzParseFailureReason feeds reason names as rows written by other
// programs hold them: a name it accepts is a reason's String or its
// decimal value, and the reason reads back from its String.
func FuzzParseFailureReason(f *testing.F) {
	for _, s := range []string{"PoisonMessage", "poisonmessage", "7", "07", "-1", "99", "FailureReason(42)", "", " Unknown", "\x00"} {
		f.Add(s)
	}
	for _, r := range errorhandling.Reasons {
		f.Add(r.String())
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := errorhandling.ParseFailureReason(s)
		if err != nil {
			return
		}
		if s != r.String() && s != fmt.Sprint(int(r)) {
			t.Fatalf("ParseFailureReason(%q) = %v, but %q is neither its name nor its value", s, r, s)
		}
		if back, err := errorhandling.ParseFailureReason(r.String()); err != nil || back != r {
			t.Fatalf("ParseFailureReason(%q) = %v, %v; want %v", r.String(), back, err, r)
		}
	})
}

// sqlError carries a SQLSTATE as pgx's *pgconn.PgError does.
type sqlError struct{ state string }

func (e sqlError) Error() string    { return "ERROR: something (SQLSTATE " + e.state + ")" }
func (e sqlError) SQLState() string { return e.state }

// FuzzClassifyExternal classifies errors carrying what a peer sent: an
// HTTP status and a SQLSTATE of any value. Classification never fails,
// says Retryable exactly for transient and recognised faults, and follows
// the documented tables: 5xx and 429 are transient faults of the
// destination, the other 4xx but the refusals a permanent fault of the
// message; SQLSTATE classes 08, 40, 53, 57, 58 transient faults of the
// database, 22, 23, 42 permanent faults of the message.
func FuzzClassifyExternal(f *testing.F) {
	for _, s := range []struct {
		status int
		state  string
	}{{503, ""}, {422, ""}, {429, ""}, {401, ""}, {0, "40001"}, {0, "23505"}, {0, "08006"}, {0, "XX000"},
		{0, "4000"}, {0, "400011"}, {-1, "\x00\x00\x00\x00\x00"}, {999, "22P02"}, {1 << 40, "57P01"}} {
		f.Add(s.status, s.state)
	}
	c := errorhandling.NewErrorClassifier()
	f.Fuzz(func(t *testing.T, status int, state string) {
		if status != 0 {
			v := c.Classify(errorhandling.WithHTTPStatus(errors.New("answered"), status))
			checkRetryable(t, v)
			switch {
			case status == 429 || status >= 500 && status <= 599:
				if !v.Retryable || v.Blame != errorhandling.BlameDestination {
					t.Fatalf("HTTP %d classified %+v, want a transient fault of the destination", status, v)
				}
			case status == 400 || status == 413 || status == 415 || status == 422:
				if v.Class != errorhandling.ClassPermanent || v.Blame != errorhandling.BlameMessage {
					t.Fatalf("HTTP %d classified %+v, want a permanent fault of the message", status, v)
				}
			}
		}
		v := c.Classify(sqlError{state: state})
		checkRetryable(t, v)
		if len(state) == 5 {
			switch state[:2] {
			case "08", "40", "53", "57", "58":
				if !v.Retryable || v.Blame != errorhandling.BlameDestination {
					t.Fatalf("SQLSTATE %q classified %+v, want a transient fault of the database", state, v)
				}
			case "22", "23", "42":
				if v.Class != errorhandling.ClassPermanent || v.Blame != errorhandling.BlameMessage {
					t.Fatalf("SQLSTATE %q classified %+v, want a permanent fault of the message", state, v)
				}
			}
		}
	})
}

func checkRetryable(t *testing.T, v errorhandling.Classification) {
	t.Helper()
	switch v.Class {
	case errorhandling.ClassTransient, errorhandling.ClassRecognised:
		if !v.Retryable {
			t.Fatalf("%+v: a %v fault must be retryable", v, v.Class)
		}
	case errorhandling.ClassPermanent:
		if v.Retryable {
			t.Fatalf("%+v: a permanent fault must not be retryable", v)
		}
	}
}
