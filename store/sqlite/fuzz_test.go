package sqlite

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// fuzzColumns are the outbox columns a fuzzed row may set, as another
// language could, with any SQLite value (or leave to their default).
var fuzzColumns = []string{"destination", "stream", "type", "payload", "headers", "status", "attempts",
	"failure_reason", "error", "scheduled_for", "instance_id", "lease_expiry", "created_at", "dead_lettered_at",
	"first_failed_at", "stream_released_at", "published_at"}

// fuzzRow turns data into values for some of fuzzColumns: per column one
// byte picks default (column left out), NULL, an integer, a real, text or
// a blob, and the bytes after it give the value. The destination, when
// left out, is dest.
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
	for _, c := range fuzzColumns {
		if len(data) == 0 {
			break
		}
		kind := next(1)[0] % 8
		var v any
		switch kind {
		case 0, 1, 2: // default: most columns keep theirs
			continue
		case 3:
			v = nil
		case 4:
			var b [8]byte
			copy(b[:], next(8))
			n := int64(binary.LittleEndian.Uint64(b[:]))
			if len(data) > 0 && data[0]%2 == 0 {
				n %= 1 << 20 // small numbers hit the valid ranges
			}
			v = n
		case 5:
			var b [8]byte
			copy(b[:], next(8))
			f := math.Float64frombits(binary.LittleEndian.Uint64(b[:]))
			if math.IsNaN(f) {
				f = 0.5
			}
			v = f
		case 6:
			v = string(next(size()))
		case 7:
			v = append([]byte(nil), next(size())...)
		}
		cols, args = append(cols, c), append(args, v)
	}
	// destination and type have no default: a row without them is refused
	// before anything can go wrong, so they take usable values when left out
	for c, v := range map[string]any{"destination": dest, "type": "t"} {
		if !slicesContainsArg(cols, c) {
			cols, args = append(cols, c), append(args, v)
		}
	}
	return cols, args
}

// FuzzClaimArbitraryRows writes a row with arbitrary values, as a plain
// SQL INSERT from another language could (the checks of migration 0003
// dropped, as in a database that held the row before them), between two
// good messages, and claims: the claim never fails as a whole, the good
// messages are claimed, and the row is either readable (claimed or not,
// by the claim rules) or dead-lettered with a SerializationError entry.
func FuzzClaimArbitraryRows(f *testing.F) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(f.TempDir(), "fuzz.db"), store.Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	dropChecks(f, s.w, "backstop_")
	for _, seed := range [][]byte{
		{},
		{0, 0, 0, 0, 0, 6, 3, 'a', 'b', 'c'}, // status 'abc'
		{0, 0, 0, 0, 0, 0, 6, 1, 'x'},        // attempts 'x'
		{0, 0, 0, 0, 6, 5, '[', '1', ',', '2', ']'},           // headers [1,2]
		{0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 4, 't', 'e', 'x', 't'}, // text scheduled_for
		{0, 0, 6, 0},             // empty type
		{0, 0, 7, 2, 0xff, 0xfe}, // blob type
		{0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0}, // status 1
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
		marks := strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ")
		var seq int64
		err := s.w.QueryRowContext(ctx, `INSERT INTO backstop_outbox (`+strings.Join(cols, ", ")+`) VALUES (`+marks+
			`) RETURNING seq`, args...).Scan(&seq)
		if err != nil {
			t.Skipf("the schema refused the row: %v", err) // NOT NULL, the id and ordering checks
		}
		before, err := scanRaw(s.w.QueryRowContext(ctx, `SELECT `+messageColumns+` FROM backstop_outbox WHERE seq = ?`, seq))
		if err != nil {
			t.Fatal(err)
		}
		_, bad := before.decode()
		if err := s.Enqueue(ctx, good[1]); err != nil {
			t.Fatal(err)
		}
		res, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "fuzz"},
			Claim: store.ClaimRequest{Limit: 10, Destinations: []string{dest}}})
		if err != nil {
			t.Fatalf("ProcessBatch failed as a whole: %v\nrow: %v = %#v", err, cols, args)
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
					g.ID, len(res.Claimed), len(res.Quarantined), cols, args)
			}
		}
		if bad == nil {
			return // readable: claimed, or not by the claim rules
		}
		if _, ok := before[17].(int64); ok {
			return // written as dead-lettered: never claimed, nothing to quarantine
		}
		id, _ := before[1].(string)
		reason := errorhandling.ReasonSerializationError
		list, err := s.DLQ().List(ctx, &dlq.Filters{Reason: &reason})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list {
			if e.MessageID == id && strings.Contains(e.ErrorMessage, "column ") {
				return
			}
		}
		t.Fatalf("row %d (%s: %v) was neither claimed valid nor quarantined\nrow: %v = %#v", seq, id, bad, cols, args)
	})
}

func slicesContainsArg(cols []string, c string) bool {
	for _, x := range cols {
		if x == c {
			return true
		}
	}
	return false
}
