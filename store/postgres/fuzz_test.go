package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// fuzzRow turns data into column values for a plain-SQL INSERT, as another
// language could write them: per column one byte picks default (left
// out), NULL, or a value of the column's type from the bytes after it,
// infinite times and any JSON (or not-JSON) text for headers included. The
// destination, when left out, is dest.
func fuzzRow(data []byte, dest string) (cols []string, args []any) {
	next := func(n int) []byte {
		n = min(n, len(data))
		b := data[:n]
		data = data[n:]
		return b
	}
	size := func() int { // a length byte, 0 when none is left
		if b := next(1); len(b) == 1 {
			return int(b[0]) % 24
		}
		return 0
	}
	num := func() int64 {
		var b [8]byte
		copy(b[:], next(8))
		return int64(binary.LittleEndian.Uint64(b[:]))
	}
	text := func() string { return string(next(size())) }
	ts := func() any {
		switch k := next(1); {
		case len(k) == 0:
			return nil
		case k[0]%4 == 0:
			return "infinity"
		case k[0]%4 == 1:
			return "-infinity"
		default:
			return time.Unix(num()%(400*365*24*3600), 0).UTC().Format(time.RFC3339)
		}
	}
	type col struct {
		name string
		cast string
		val  func() any
	}
	all := []col{
		{"destination", "text", func() any { return text() }},
		{"stream", "text", func() any { return text() }},
		{"type", "text", func() any { return text() }},
		{"payload", "bytea", func() any { return []byte(text()) }},
		{"headers", "jsonb", func() any { return text() }},
		{"ordering", "text", func() any { return text() }},
		{"status", "int", func() any { return int32(num()) }},
		{"attempts", "int", func() any { return int32(num()) }},
		{"failure_reason", "int", func() any { return int32(num()) }},
		{"error", "text", func() any { return text() }},
		{"scheduled_for", "timestamptz", ts},
		{"instance_id", "text", func() any { return text() }},
		{"lease_expiry", "timestamptz", ts},
		{"created_at", "timestamptz", ts},
		{"dead_lettered_at", "timestamptz", ts},
		{"first_failed_at", "timestamptz", ts},
		{"published_at", "timestamptz", ts},
	}
	hasDest, hasType := false, false
	for _, c := range all {
		if len(data) == 0 {
			break
		}
		var v any
		switch next(1)[0] % 4 {
		case 0, 1:
			continue
		case 2:
			v = nil
		case 3:
			v = c.val()
		}
		hasDest = hasDest || c.name == "destination"
		hasType = hasType || c.name == "type"
		cols, args = append(cols, c.name+"::"+c.cast), append(args, v)
	}
	// destination and type have no default: a row without them is refused
	// before anything can go wrong, so they take usable values when left out
	if !hasDest {
		cols, args = append(cols, "destination::text"), append(args, dest)
	}
	if !hasType {
		cols, args = append(cols, "type::text"), append(args, "t")
	}
	return cols, args
}

// FuzzClaimArbitraryRows writes a row with arbitrary values of the
// columns' types, as another language could (the constraints of migration
// 0002 dropped, as in a database that held the row before them), between
// two good messages, and claims: the claim never fails as a whole, the
// good messages are claimed, and the row is either readable (claimed or
// not, by the claim rules) or dead-lettered with a SerializationError
// entry.
func FuzzClaimArbitraryRows(f *testing.F) {
	ctx := context.Background()
	s, err := openTest(f, store.Config{})
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range checkConstraints {
		if _, err := s.pool.Exec(ctx, `ALTER TABLE `+s.n.outbox+` DROP CONSTRAINT `+s.n.prefix+c); err != nil {
			f.Fatal(err)
		}
	}
	for _, seed := range [][]byte{
		{},
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1}, // scheduled_for -infinity
		{0, 0, 0, 0, 3, 5, '[', '1', ',', '2', ']'}, // headers [1,2]
		{0, 0, 3, 0}, // empty type
		{0, 0, 0, 0, 0, 0, 0, 3, 255, 255, 255, 255, 255, 255, 255, 255}, // attempts -1
		// empty destination, leased until 2128 by an instance named ""
		{3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 3, 2, 0, 0xf2, 0x05, 0x2a, 0x01, 0, 0, 0},
		// empty type, leased until 2128 by an instance that never heart-beat
		{0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 5, 'g', 'h', 'o', 's', 't', 3, 2, 0, 0xf2, 0x05, 0x2a, 0x01, 0, 0, 0},
	} {
		f.Add(seed)
	}
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, data []byte) {
		dest := fmt.Sprintf("d%d", n.Add(1))
		good := []*outbox.Message{{Destination: dest, Type: "good"}, {Destination: dest, Type: "good"}}
		if err := s.Enqueue(ctx, good[0]); err != nil {
			t.Fatal(err)
		}
		cols, args := fuzzRow(data, dest)
		names, marks := make([]string, len(cols)), make([]string, len(cols))
		for i, c := range cols {
			name, cast, _ := strings.Cut(c, "::")
			names[i], marks[i] = name, fmt.Sprintf("$%d::%s", i+1, cast)
		}
		var seq int64
		err := s.pool.QueryRow(ctx, `INSERT INTO `+s.n.outbox+` (`+strings.Join(names, ", ")+`) VALUES (`+
			strings.Join(marks, ", ")+`) RETURNING seq`, args...).Scan(&seq)
		if err != nil {
			t.Skipf("the database refused the row: %v", err) // NOT NULL, types, ordering, encoding
		}
		var before rawMessage
		if err := s.pool.QueryRow(ctx, `SELECT `+msgCols+` FROM `+s.n.outbox+` WHERE seq = $1`, seq).Scan(before.dest()...); err != nil {
			t.Fatal(err)
		}
		_, bad := before.decode()
		if err := s.Enqueue(ctx, good[1]); err != nil {
			t.Fatal(err)
		}
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := s.ProcessBatch(bctx, &store.Batch{Instance: store.Instance{ID: "fuzz"},
			Claim: store.ClaimRequest{Limit: 10, Destinations: []string{dest}}})
		if err != nil {
			t.Fatalf("ProcessBatch failed as a whole: %v\nrow: %v = %#v", err, names, args)
		}
		claimed := map[uuid.UUID]bool{}
		for _, m := range res.Claimed {
			claimed[m.ID] = true
			if m.Destination == "" || m.Type == "" || m.Attempts < 0 || m.Status < 0 || m.Status > store.MaxStatus {
				t.Fatalf("claimed an invalid message %+v", m)
			}
		}
		for _, g := range good {
			if !claimed[g.ID] {
				t.Fatalf("good message %s not claimed; claimed %d, quarantined %d\nrow: %v = %#v",
					g.ID, len(res.Claimed), len(res.Quarantined), names, args)
			}
		}
		if bad == nil {
			return // readable: claimed, or not by the claim rules
		}
		if i := indexOf(names, "dead_lettered_at"); i >= 0 && args[i] != nil && args[i] != "infinity" && args[i] != "-infinity" {
			return // written as dead-lettered: never claimed, nothing to quarantine
		}
		if !quarantinedEntry(ctx, t, s, uuid.UUID(before.id.Bytes)) {
			t.Fatalf("row %d (%v) was neither claimed valid nor quarantined\nrow: %v = %#v", seq, bad, names, args)
		}
	})
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}

// quarantinedEntry reports whether a SerializationError entry parks id.
func quarantinedEntry(ctx context.Context, t *testing.T, s *Store, id uuid.UUID) bool {
	reason := errorhandling.ReasonSerializationError
	list, err := s.DLQ().List(ctx, &dlq.Filters{Reason: &reason})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if e.MessageID == id.String() {
			return true
		}
	}
	return false
}
