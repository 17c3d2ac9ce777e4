package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// sqliteWriter writes the load into the SQLite file the relay process
// shares: the store's EnqueueTx in the application's transaction, or
// plain INSERTs.
func sqliteWriter(st *sqlite.Store) writer {
	return func(ctx context.Context, msgs []*outbox.Message, style int) ([]string, error) {
		ids := make([]string, len(msgs))
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback() }()
		if style == styleSQL {
			for i, m := range msgs {
				if err := tx.QueryRowContext(ctx, `INSERT INTO backstop_outbox (destination, stream, type, payload)
					VALUES (?, ?, ?, ?) RETURNING id`, m.Destination, m.Stream, m.Type, m.Payload).Scan(&ids[i]); err != nil {
					return nil, err
				}
			}
		} else {
			if err := st.EnqueueTx(ctx, tx, msgs...); err != nil {
				return nil, err
			}
			for i, m := range msgs {
				ids[i] = m.ID.String()
			}
		}
		return ids, tx.Commit()
	}
}

// TestChaosSQLite runs one relay process on a SQLite file that the test
// process writes its load into, SIGKILLs it repeatedly while it delivers
// (and so while it writes its outcomes and claims), restarts it each time,
// and checks the ledger and the database's integrity.
func TestChaosSQLite(t *testing.T) {
	t.Parallel()
	sz := chaosSize()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "chaos.db")
	st, err := sqlite.Open(ctx, path, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	l := newLedger()
	rc := newReceiver(t, l)
	f := newFleet(t, func(id string) []string {
		return []string{"-store", "sqlite", "-db", path, "-url", rc.url(), "-secret", secret,
			"-instance", id, "-lease", lease.String(), "-instance-timeout", instanceTimeout.String(),
			"-breaker-timeout", breakerTimeout.String(), "-workers", "8"}
	})
	f.start("s")
	shape := sz.sqliteLoad
	gen := startGenerator(ctx, l, sqliteWriter(st), shape)
	defer gen.halt()

	rep := &report{title: fmt.Sprintf("SQLite: 1 relay process, %d strict streams (%s size)", shape.streams, sz.name)}
	defer rep.finish(t, l)
	count := func(ctx context.Context, sql string) (n int, err error) {
		err = st.DB().QueryRowContext(ctx, sql).Scan(&n)
		return n, err
	}
	// leased returns the messages instance holds leases on.
	leased := func(instance string) []string {
		rows, err := st.DB().QueryContext(ctx, `SELECT id FROM backstop_outbox WHERE instance_id = ?
			AND lease_expiry > CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
			AND published_at IS NULL AND dead_lettered_at IS NULL`, instance)
		if err != nil {
			t.Fatalf("leases of %s: %v", instance, err)
		}
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatalf("leases of %s: %v", instance, err)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("leases of %s: %v", instance, err)
		}
		return ids
	}
	pending := func(ids []string) (n int, err error) {
		list, _ := json.Marshal(ids)
		err = st.DB().QueryRowContext(ctx, `SELECT count(*) FROM backstop_outbox
			WHERE id IN (SELECT value FROM json_each(?)) AND published_at IS NULL AND dead_lettered_at IS NULL`, string(list)).Scan(&n)
		return n, err
	}
	settle := func(p *phase, stranded ...string) {
		p.backlog = undelivered(ctx, count, "backstop_outbox")
		r := l.recoveryFrom(nil, stranded)
		at, err := r.settle(ctx, sz.recoverLimit, pending)
		if err != nil {
			p.failed = err.Error()
			t.Errorf("%s: not recovered: %s; such as %v", p.name, p.failed, head(r.left()))
			return
		}
		p.recovery = at.Sub(p.end)
	}
	if err := l.waitFor(ctx, 30*time.Second, func() bool { return len(l.arrivals) >= 100 }); err != nil {
		t.Fatalf("the relay delivered under 100 messages in 30 s: %v; log: %s", err, tail(filepath.Join(f.dir, "relay-s-1.log")))
	}
	calm := &phase{name: "none (steady load)", start: time.Now()}
	calm.end = calm.start
	settle(calm)
	rep.add(calm)
	for i := range sz.sqliteKills {
		id := f.instance("s")
		// The receiver answers one of its deliveries and springs: the
		// relay is then recording it, in a write transaction.
		tr := rc.setTrap(id, false)
		if !tr.wait(20 * time.Second) {
			t.Fatalf("%s delivered nothing in 20 s", id)
		}
		p := &phase{name: fmt.Sprintf("SIGKILL while writing #%d", i+1), start: time.Now()}
		next := f.kill("s")
		stranded := leased(id)
		p.end = p.start
		p.note = fmt.Sprintf("%s killed as a delivery was answered (after %d deliveries), holding %d leases; %s started",
			id, l.arrivedFrom(id), len(stranded), next)
		settle(p, stranded...)
		rep.add(p)
	}
	if errs := gen.halt(); len(errs) > 0 {
		t.Errorf("the load generator's transactions failed %d times, first: %v", len(errs), errs[0])
	}
	drain := &phase{name: "load stopped: final drain", start: time.Now()}
	drain.end = drain.start
	settle(drain)
	rep.add(drain)

	var integrity string
	if err := st.DB().QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&integrity); err != nil {
		t.Fatal(err)
	}
	if integrity != "ok" {
		t.Errorf("PRAGMA integrity_check = %q after the kills", integrity)
	}
	rep.fact("SQLite integrity_check", "%s", integrity)
	rep.fact("load transactions (bursts of "+fmt.Sprint(shape.burstN)+")", "%d (%d); ticks skipped because the backlog was over %d: %d", gen.txs, gen.bursts, gen.shape.maxBacklog, gen.skipped)
	finalChecks(t, ctx, st, f, rc, l, rep, nil)
	assertVerdict(t, rep)
}

func head(ids []string) []string {
	if len(ids) > 5 {
		return ids[:5]
	}
	return ids
}
