package admin_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

// bulkTotal is the payload bytes of all the entries together: 100 MiB,
// whatever their number, so that holding them at once would show.
const bulkTotal = 100 << 20

// bulkEntries is how many dead letters the bounded-memory test replays:
// BACKSTOP_BULK_ENTRIES, else 2,000 so that make test stays quick (100k
// takes minutes on a loaded 2-core machine; docs/operating.md has its
// figures).
func bulkEntries() int {
	if v, err := strconv.Atoi(os.Getenv("BACKSTOP_BULK_ENTRIES")); err == nil && v > 0 {
		return v
	}
	return 2_000
}

// fill writes n dead letters of outbox messages with plain SQL, each with a
// payload of bulkPayload bytes, the way a year of failures accumulates.
func fill(t *testing.T, st store.Store, n, bulkPayload int) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	switch s := st.(type) {
	case *sqlite.Store:
		_, err := s.DB().ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
			INSERT INTO backstop_dead_letters (id, message_id, destination, stream, type, payload, failure_reason, reason, failure_time, attempts, error_message)
			SELECT printf('e%08d', i),
				lower(printf('%s-%s-4%s-a%s-%s', hex(randomblob(4)), hex(randomblob(2)), substr(hex(randomblob(2)), 2), substr(hex(randomblob(2)), 2), hex(randomblob(6)))),
				'billing', 'cust-' || (i % 1000), 'invoice.due', zeroblob(?), 'TransportUnavailable', 1,
				1700000000000 + i, 3, 'connection refused'
			FROM n`, n, bulkPayload)
		if err != nil {
			t.Fatal(err)
		}
	case *postgres.Store:
		_, err := s.Pool().Exec(ctx, `INSERT INTO backstop_dead_letters (id, message_id, destination, stream, type, payload, failure_reason, reason, failure_time, attempts, error_message)
			SELECT format('e%s', lpad(i::text, 8, '0')), gen_random_uuid()::text, 'billing', 'cust-' || (i % 1000), 'invoice.due',
				convert_to(repeat('x', $2), 'UTF8'), 'TransportUnavailable', 1, to_timestamp(1700000000 + i / 1000.0), 3, 'connection refused'
			FROM generate_series(1, $1) AS i`, n, bulkPayload)
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d entries written in %s", n, time.Since(start).Round(time.Millisecond))
}

// peakHeap samples runtime.MemStats.HeapAlloc every 2 ms until stop is
// closed and returns the highest reading.
func peakHeap(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var ms runtime.MemStats
		var peak uint64
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// TestBulkReplayBoundedMemory replays dead letters carrying 100 MiB of
// payloads (100k entries with BACKSTOP_BULK_ENTRIES=100000) through the API
// in one request, a dry run first, in pages of about 1 MiB, and checks that the
// heap never grew by more than a quarter of what holding them would take.
func TestBulkReplayBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("100k entries: not in -short")
	}
	var mu sync.Mutex // one store at a time: the heap is the process's
	stores(t, func(t *testing.T, st store.Store) {
		mu.Lock()
		defer mu.Unlock()
		bulkEntries := bulkEntries()
		bulkPayload := bulkTotal / bulkEntries
		fill(t, st, bulkEntries, bulkPayload)
		// Pages of about 1 MiB of payloads: 500 entries of 1 KiB, 20 of 50 KiB.
		page := min(500, max(20, (1<<20)/bulkPayload))
		a := newAPI(t, st, func(c *admin.Config) { c.BulkPage = page })
		ctx := context.Background()
		f := admin.Filter{Destination: "billing"}

		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		stop := make(chan struct{})
		peak := peakHeap(stop)
		start := time.Now()
		dry, err := a.op.Bulk(ctx, "replay", admin.BulkRequest{Filter: f, DryRun: true})
		if err != nil || dry.Count != bulkEntries || len(dry.Sample) != 10 {
			t.Fatalf("dry run: count %d sample %d: %v", dry.Count, len(dry.Sample), err)
		}
		dryTook := time.Since(start)
		start = time.Now()
		res, err := a.op.Bulk(ctx, "replay", admin.BulkRequest{Filter: f, Notes: "backfill"})
		took := time.Since(start)
		close(stop)
		grew := int64(<-peak) - int64(base.HeapAlloc)
		if err != nil || res.Count != bulkEntries {
			t.Fatalf("replay: count %d: %v", res.Count, err)
		}
		t.Logf("%T, pages of %d: dry run %s, replay of %d entries %s; heap peak %.1f MiB above the %.1f MiB before (payloads: %d MiB)",
			st, page, dryTook.Round(time.Millisecond), res.Count, took.Round(time.Millisecond), float64(grew)/(1<<20),
			float64(base.HeapAlloc)/(1<<20), bulkEntries*bulkPayload>>20)
		if limit := int64(bulkEntries*bulkPayload) / 4; grew > limit {
			t.Errorf("heap grew by %d MiB, more than a quarter of the payloads (%d MiB): not bounded", grew>>20, limit>>20)
		}
		depth, err := st.DLQ().Count(ctx)
		if err != nil || depth != 0 {
			t.Errorf("depth after the replay: %d %v", depth, err)
		}
		n := 0
		for cursor := int64(0); ; {
			page, err := st.(store.Admin).ListMessages(ctx, store.MessageFilter{AfterSeq: cursor, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			n += len(page)
			if len(page) < 1000 {
				break
			}
			cursor = page[len(page)-1].Seq
		}
		if n != bulkEntries {
			t.Errorf("%d messages back in the outbox, want %d", n, bulkEntries)
		}
		if log, _ := a.rd.Audit(ctx, nil); len(log.Items) != 1 || log.Items[0].Count != bulkEntries {
			t.Errorf("audit %+v", log.Items)
		}
	})
}
