package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
)

// crashSchema is the schema of the private cluster's tables.
const crashSchema = "chaos"

// idWriter writes the load as pgWriter does, but names every message and
// its transaction before it writes, so that a write whose commit got no
// answer can be looked for afterwards (resolveByOrder).
func idWriter(st *postgres.Store) writer {
	return func(ctx context.Context, msgs []*outbox.Message, style int) ([]string, error) {
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			if m.ID == uuid.Nil {
				id, err := uuid.NewV7()
				if err != nil {
					return nil, err
				}
				m.ID = id
			}
			ids[i] = m.ID.String()
		}
		err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+crashSchema+`.chaos_orders (id, messages) VALUES ($1, $2)`,
				msgs[0].ID, len(msgs)); err != nil {
				return err
			}
			if style == styleSQL {
				for _, m := range msgs {
					if _, err := tx.Exec(ctx, `INSERT INTO `+crashSchema+`.backstop_outbox (id, destination, stream, type, payload)
						VALUES ($1, $2, $3, $4, $5)`, m.ID, m.Destination, m.Stream, m.Type, m.Payload); err != nil {
						return err
					}
				}
				return nil
			}
			return st.EnqueueTx(ctx, tx, msgs...)
		})
		return ids, err
	}
}

// resolveByOrder tells whether idWriter's transaction for msgs committed:
// its application row is there or it is not. It is asked only once the
// write has failed, so the transaction is over either way.
func resolveByOrder(st *postgres.Store) resolver {
	return func(ctx context.Context, msgs []*outbox.Message) (bool, error) {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var found bool
		err := st.Pool().QueryRow(qctx, `SELECT EXISTS (SELECT 1 FROM `+crashSchema+`.chaos_orders WHERE id = $1)`,
			msgs[0].ID).Scan(&found)
		return found, err
	}
}

// TestChaosPostgresCrash crashes PostgreSQL itself under load: a server
// of the test's own (the machine's is shared), three relay processes on
// it, strict streams and messages with no stream written together, and
// the server's processes all killed with SIGKILL at once, then started
// again (crash recovery replays the WAL). A relay's claim of messages
// with no stream commits without waiting for the disk (README), so a
// crash can take leases back; what the ledger must show is that it never
// takes back a message or a recorded delivery: nothing lost, strict
// streams in order, no stale re-send, no dead letter, no stream blocked.
// Writes of the load whose commit got no answer are looked up once the
// server is back, as an application would.
func TestChaosPostgresCrash(t *testing.T) {
	t.Parallel()
	sz := chaosSize()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	pg := newCluster(t)

	pg.exec(ctx, `CREATE SCHEMA `+crashSchema+`;
		CREATE TABLE `+crashSchema+`.chaos_orders (id uuid PRIMARY KEY, messages int NOT NULL)`)
	st, err := postgres.Open(ctx, pg.URL("application_name=backstop_chaos_gen"), store.Config{}, postgres.WithSchema(crashSchema))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	l := newLedger()
	rc := newReceiver(t, l)
	relayURL := pg.URL("application_name=backstop_chaos_relay")
	f, slots := startPGRelays(t, relayURL, crashSchema, rc)
	shape := sz.load
	shape.burstN, shape.burstAt = 0, 0 // the bursts are TestChaosPostgres's
	shape.unorderedEvery = 2
	shape.every = 10 * time.Millisecond
	gen := startResolvingGenerator(ctx, l, idWriter(st), resolveByOrder(st), shape)
	defer gen.halt()

	rep := &report{title: fmt.Sprintf("PostgreSQL crashed: a private server, 3 relay processes, %d strict streams and messages with no stream (%s size)",
		shape.streams, sz.name)}
	defer rep.finish(t, l)
	count, pending := pgQueries(ctx, st, crashSchema)
	// settle waits until every message committed before the fault has
	// arrived and, of those committed before since, none is left pending
	// in the outbox: the deliveries were recorded, whether by the relay
	// that made them or by another after it delivered them again.
	settle := func(p *phase, since time.Time) {
		p.backlog = undelivered(ctx, count, crashSchema+".backstop_outbox")
		at, err := l.recoveryFrom(nil, l.committedBetween(since, p.start)).settle(ctx, sz.recoverLimit, pending)
		if err != nil {
			p.failed = err.Error()
			t.Errorf("%s: not recovered: %s", p.name, p.failed)
			return
		}
		p.recovery = at.Sub(p.end)
	}
	if err := l.waitFor(ctx, 30*time.Second, func() bool { return len(l.arrivals) >= 200 }); err != nil {
		t.Fatalf("the relays delivered under 200 messages in 30 s: %v; logs: %s", err, tail(f.dir+"/relay-a-1.log"))
	}
	calm := &phase{name: "none (steady load)", start: time.Now()}
	calm.end = calm.start
	settle(calm, calm.start)
	rep.add(calm)

	downs := make([]time.Duration, sz.crashes)
	for i := range downs {
		downs[i] = sz.crashDown
	}
	if sz.crashLong > 0 {
		// Down past the instance timeout: after it every relay has been
		// silent too long, and the first to beat declares the others dead.
		downs = append(downs, sz.crashLong)
	}
	for i, down := range downs {
		// Crash while a delivery is under way: one relay's request has
		// reached the receiver, whose answer is held until the server is
		// down, so the relay must record that outcome after the restart.
		// The other relays are claiming and recording meanwhile.
		// First a stretch of steady load since the last restart, so that
		// the crash meets claims, leases and recordings of a running fleet.
		before := l.arrivedCount()
		if err := l.waitFor(ctx, 30*time.Second, func() bool { return len(l.arrivals) >= before+sz.crashAfter }); err != nil {
			t.Fatalf("crash #%d: under %d deliveries since the last restart: %v", i+1, sz.crashAfter, err)
		}
		slot := slots[i%len(slots)]
		id := f.instance(slot)
		tr := rc.setTrap(id, true)
		if !tr.wait(20 * time.Second) {
			t.Fatalf("%s delivered nothing in 20 s", id)
		}
		p := &phase{name: fmt.Sprintf("PostgreSQL crashed (SIGKILL to every process) #%d", i+1), start: time.Now()}
		pg.crash()
		close(tr.release)
		<-time.After(down) // the fault is a duration
		took := pg.start()
		p.end = time.Now()
		p.note = fmt.Sprintf("%s's answer held across the crash; down %v (instance timeout %v), then crash recovery and first connection %v",
			id, down, instanceTimeout, took.Round(time.Millisecond))
		settle(p, p.start.Add(-10*time.Second))
		rep.add(p)
	}

	if errs := gen.halt(); len(errs) > 0 {
		t.Errorf("the load generator's transactions failed %d times, first: %v", len(errs), errs[0])
	}
	drain := &phase{name: "load stopped: final drain", start: time.Now()}
	drain.end = drain.start
	settle(drain, drain.start)
	rep.add(drain)

	rep.fact("load transactions", "%d, of which %d got no answer from a crashing server: %d had committed (found after the restart), the rest had not",
		gen.txs, gen.inDoubt, gen.inDoubtCommitted)
	finalChecks(t, ctx, st, f, rc, l, rep, nil)
	if exits := f.unexpectedExits(); len(exits) > 0 {
		t.Errorf("relays exited by themselves around the crashes (a relay should ride out a database restart): %s",
			strings.Join(exits, "; "))
	}
	assertVerdict(t, rep)
}
