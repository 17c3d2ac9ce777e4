package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
)

// The relays' timing, short so that faults outlast them quickly.
const (
	lease           = 2 * time.Second
	instanceTimeout = 10 * time.Second
	breakerTimeout  = time.Second
)

// withAppName returns the test server's URL (or DSN) with an
// application_name, by which the chaos relays' connections are found.
func withAppName(t testing.TB, name string) string {
	raw := testenv.PostgresURL()
	if !strings.HasPrefix(raw, "postgres://") && !strings.HasPrefix(raw, "postgresql://") {
		return raw + " application_name=" + name
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %v", testenv.PostgresEnv, err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

func randomTag() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// pgWriter writes the load: the store's EnqueueTx inside a transaction
// that also writes an application row, or plain INSERTs into the outbox.
func pgWriter(st *postgres.Store, schema string) writer {
	return func(ctx context.Context, msgs []*outbox.Message, style int) ([]string, error) {
		ids := make([]string, len(msgs))
		err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
			if style == styleSQL {
				for i, m := range msgs {
					if err := tx.QueryRow(ctx, `INSERT INTO `+schema+`.backstop_outbox (destination, stream, type, payload)
						VALUES ($1, $2, $3, $4) RETURNING id::text`, m.Destination, m.Stream, m.Type, m.Payload).Scan(&ids[i]); err != nil {
						return err
					}
				}
				return nil
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.chaos_orders (messages) VALUES ($1)`, len(msgs)); err != nil {
				return err
			}
			if err := st.EnqueueTx(ctx, tx, msgs...); err != nil {
				return err
			}
			for i, m := range msgs {
				ids[i] = m.ID.String()
			}
			return nil
		})
		return ids, err
	}
}

// startPGRelays starts three relay processes, in slots a, b and c, on
// schema of the PostgreSQL at dbURL, delivering to rc.
func startPGRelays(t *testing.T, dbURL, schema string, rc *receiver) (*fleet, []string) {
	clockFile := filepath.Join(t.TempDir(), "clock")
	if err := os.WriteFile(clockFile, []byte("0s"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, func(id string) []string {
		return []string{"-store", "postgres", "-db", dbURL, "-schema", schema, "-url", rc.url(), "-secret", secret,
			"-instance", id, "-lease", lease.String(), "-instance-timeout", instanceTimeout.String(),
			"-breaker-timeout", breakerTimeout.String(), "-workers", "8", "-clock-file", clockFile}
	})
	f.clockFile = clockFile
	slots := []string{"a", "b", "c"}
	for _, s := range slots {
		f.start(s)
	}
	return f, slots
}

// pgQueries are the counts the PostgreSQL runs read from st's outbox in
// schema: count runs a query of one number; pending counts the messages
// of ids neither delivered nor dead-lettered.
func pgQueries(ctx context.Context, st *postgres.Store, schema string) (
	count func(ctx context.Context, sql string) (int, error), pending func(ids []string) (int, error)) {
	count = func(ctx context.Context, sql string) (n int, err error) {
		err = st.Pool().QueryRow(ctx, sql).Scan(&n)
		return n, err
	}
	pending = func(ids []string) (n int, err error) {
		err = st.Pool().QueryRow(ctx, `SELECT count(*) FROM `+schema+`.backstop_outbox
			WHERE id = ANY($1::uuid[]) AND published_at IS NULL AND dead_lettered_at IS NULL`, ids).Scan(&n)
		return n, err
	}
	return count, pending
}

// TestChaosPostgres runs three relay processes on one PostgreSQL schema
// under a steady load across many strict streams and injects the faults in
// turn, then checks the ledger: nothing lost, every stream in order, no
// dead letter caused by an outage, no stream left blocked.
//
// The PostgreSQL "restart" does not restart the server, which other tests
// share: it terminates every backend of the chaos relays (found by their
// application_name) again and again for a while, which is what the relays
// see of a restart. The load generator's connections are spared, so that
// no commit of the application is left in doubt.
func TestChaosPostgres(t *testing.T) {
	t.Parallel()
	sz := chaosSize()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	admin := testenv.PostgresAdmin(t)
	schema := testenv.NewSchema(t, "chaos_")
	tag := randomTag()
	relayApp, genApp := "backstop_chaos_relay_"+tag, "backstop_chaos_gen_"+tag

	st, err := postgres.Open(ctx, withAppName(t, genApp), store.Config{}, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `CREATE TABLE `+schema+`.chaos_orders (id bigserial PRIMARY KEY, messages int NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	l := newLedger()
	rc := newReceiver(t, l)
	relayURL := withAppName(t, relayApp)
	f, slots := startPGRelays(t, relayURL, schema, rc)
	gen := startGenerator(ctx, l, pgWriter(st, schema), sz.load)
	defer gen.halt()

	rep := &report{title: fmt.Sprintf("PostgreSQL: 3 relay processes, %d strict streams (%s size)", sz.load.streams, sz.name)}
	defer rep.finish(t, l)
	count, pending := pgQueries(ctx, st, schema)
	// leased returns the messages instance holds leases on.
	leased := func(instance string) []string {
		rows, _ := st.Pool().Query(ctx, `SELECT id::text FROM `+schema+`.backstop_outbox
			WHERE instance_id = $1 AND lease_expiry > now() AND published_at IS NULL AND dead_lettered_at IS NULL`, instance)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("leases of %s: %v", instance, err)
		}
		return ids
	}
	var held func(*sent) bool // messages held back on purpose, not waited for
	// rows describes outbox rows, for a recovery that did not happen.
	rows := func(ids []string) string {
		if len(ids) > 5 {
			ids = ids[:5]
		}
		rs, _ := st.Pool().Query(ctx, `SELECT format('%s %s #%s: status %s, attempts %s, instance %s, lease expiry %s (now %s), scheduled %s, dead-lettered %s',
			id, stream, seq, status, attempts, instance_id, lease_expiry, now(), scheduled_for, dead_lettered_at)
			FROM `+schema+`.backstop_outbox WHERE id = ANY($1::uuid[])`, ids)
		out, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil {
			return err.Error()
		}
		return strings.Join(out, "; ")
	}
	settle := func(p *phase, stranded ...string) {
		p.backlog = undelivered(ctx, count, schema+".backstop_outbox")
		r := l.recoveryFrom(held, stranded)
		at, err := r.settle(ctx, sz.recoverLimit, pending)
		if err != nil {
			p.failed = err.Error()
			t.Errorf("%s: not recovered: %s; such as: %s; held by the faulted relay: %s", p.name, p.failed, rows(r.left()), rows(stranded))
			return
		}
		p.recovery = at.Sub(p.end)
	}
	if err := l.waitFor(ctx, 30*time.Second, func() bool { return len(l.arrivals) >= 200 }); err != nil {
		t.Fatalf("the relays delivered under 200 messages in 30 s: %v; logs: %s", err, tail(f.dir+"/relay-a-1.log"))
	}
	calm := &phase{name: "none (steady load)", start: time.Now()}
	calm.end = calm.start
	settle(calm)
	rep.add(calm)

	for i := range sz.kills {
		slot := slots[i%len(slots)]
		id := f.instance(slot)
		tr := rc.setTrap(id, true)
		if !tr.wait(20 * time.Second) {
			t.Fatalf("%s delivered nothing in 20 s", id)
		}
		p := &phase{name: fmt.Sprintf("SIGKILL mid-batch #%d", i+1), start: time.Now()}
		next := f.kill(slot)
		close(tr.release)
		stranded := leased(id)
		p.end = p.start
		p.note = fmt.Sprintf("%s killed while a delivery it made was processed but not yet answered, holding %d leases; %s started", id, len(stranded), next)
		settle(p, stranded...)
		rep.add(p)
	}

	for i := range sz.stops {
		slot := slots[(i+1)%len(slots)]
		id := f.instance(slot)
		tr := rc.setTrap(id, true)
		if !tr.wait(20 * time.Second) {
			t.Fatalf("%s delivered nothing in 20 s", id)
		}
		p := &phase{name: fmt.Sprintf("SIGSTOP past the lease #%d", i+1), start: time.Now()}
		if rep.stopped == nil {
			rep.stopped = map[string]bool{}
		}
		rep.stopped[id] = true
		f.signal(slot, syscall.SIGSTOP)
		close(tr.release) // the answer waits in the stopped process's socket
		stranded := leased(id)
		stopped := 2 * lease
		<-time.After(stopped) // the fault is a duration: the lease must lapse
		f.signal(slot, syscall.SIGCONT)
		p.end = time.Now()
		p.note = fmt.Sprintf("%s stopped mid-delivery, holding %d leases, for %v (lease %v), then continued", id, len(stranded), stopped, lease)
		settle(p, stranded...)
		rep.add(p)
	}

	for i := range sz.clockSteps {
		// Every relay's store clock (the database's, as the relays stamp
		// their statements with it) steps forward three leases with no time
		// passing, while one of them waits for a delivery's answer: every
		// lease looks lapsed. The relays that hold them must keep them (the
		// lease hold) and renew them on the new clock: no message may be
		// delivered twice.
		slot := slots[(i+2)%len(slots)]
		id := f.instance(slot)
		tr := rc.setTrap(id, true)
		if !tr.wait(20 * time.Second) {
			t.Fatalf("%s delivered nothing in 20 s", id)
		}
		p := &phase{name: fmt.Sprintf("database clock stepped forward #%d", i+1), start: time.Now(), noDups: true}
		step := 3 * lease
		f.stepClock(step)
		// Every other relay's next claim (within a poll) finds the leases
		// lapsed on the stepped clock; the answer is held for less than the
		// webhook's timeout, whose expiry would send it again by itself.
		<-time.After(lease / 2)
		close(tr.release)
		p.end = time.Now()
		p.note = fmt.Sprintf("every relay's store clock %v ahead (lease %v), with no time passing, while %s waited %v for an answer", step, lease, id, lease/2)
		settle(p)
		rep.add(p)
	}

	for i := range sz.pgRestarts {
		p := &phase{name: fmt.Sprintf("PostgreSQL connections terminated #%d", i+1), start: time.Now()}
		killed := 0
		tick := time.NewTicker(100 * time.Millisecond)
		for deadline := time.Now().Add(sz.pgDown); time.Now().Before(deadline); <-tick.C {
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name = $1 AND pid <> pg_backend_pid()`, relayApp).Scan(&n); err != nil {
				t.Fatalf("terminate the relays' backends: %v", err)
			}
			killed += n
		}
		tick.Stop()
		p.end = time.Now()
		p.note = fmt.Sprintf("%d relay backends terminated over %v (application_name %s; the server is shared, so not restarted)", killed, sz.pgDown, relayApp)
		settle(p)
		rep.add(p)
	}

	for _, down := range []struct {
		name string
		mode int32
	}{{"destination answers 503", mode503}, {"destination refuses connections", modeDown}} {
		p := &phase{name: down.name, start: time.Now()}
		rc.setMode(down.mode)
		<-time.After(sz.destDown)
		rc.setMode(modeUp)
		p.end = time.Now()
		p.note = fmt.Sprintf("down %v, breaker timeout %v", sz.destDown, breakerTimeout)
		settle(p)
		rep.add(p)
	}

	{
		p := &phase{name: "destination flapping", start: time.Now()}
		tick := time.NewTicker(sz.flapEvery)
		flips := 0
		for deadline := time.Now().Add(sz.flap); time.Now().Before(deadline); <-tick.C {
			if flips%2 == 0 {
				rc.setMode(mode503)
			} else {
				rc.setMode(modeUp)
			}
			flips++
		}
		tick.Stop()
		rc.setMode(modeUp)
		p.end = time.Now()
		p.note = fmt.Sprintf("503 and up in turn every %v for %v", sz.flapEvery, sz.flap)
		settle(p)
		rep.add(p)
	}

	poisonIDs := runPoison(t, ctx, sz, l, rc, gen, st, rep, &held, settle)

	// The end: the load stops, everything committed must arrive.
	if errs := gen.halt(); len(errs) > 0 {
		t.Errorf("the load generator's transactions failed %d times, first: %v", len(errs), errs[0])
	}
	drain := &phase{name: "load stopped: final drain", start: time.Now()}
	drain.end = drain.start
	settle(drain)
	rep.add(drain)

	rep.fact("load transactions (bursts of "+fmt.Sprint(sz.load.burstN)+")", "%d (%d); ticks skipped because the backlog was over %d: %d", gen.txs, gen.bursts, gen.shape.maxBacklog, gen.skipped)
	finalChecks(t, ctx, st, f, rc, l, rep, poisonIDs)
	assertVerdict(t, rep)
}

// runPoison writes a poison message into sz.poison strict streams, waits
// for each to be dead-lettered (its stream blocked behind it), then acts as
// the operator: half are replayed after the receiver is fixed to accept
// them, half released (the stream goes on without them, the entry
// resolved). It returns the poison ids.
func runPoison(t *testing.T, ctx context.Context, sz size, l *ledger, rc *receiver, gen *generator, st store.Store,
	rep *report, held *func(*sent) bool, settle func(*phase, ...string)) map[string]*sent {
	t.Helper()
	p := &phase{name: "poison messages in strict streams", start: time.Now()}
	poisons := map[string]*sent{}
	byStream := map[string]*sent{}
	for i := range sz.poison {
		s, err := gen.requestPoison(ctx, i*7%sz.load.streams)
		if err != nil {
			t.Fatal(err)
		}
		poisons[s.id] = s
		byStream[s.stream] = s
	}
	*held = func(m *sent) bool {
		ps, ok := byStream[m.stream]
		return ok && m.n >= ps.n
	}
	// Wait for every poison message to reach the dead-letter queue.
	entries := map[string]*dlq.Entry{}
	deadline := time.Now().Add(sz.recoverLimit)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	waiting := func() bool {
		if len(entries) < len(poisons) {
			return true
		}
		for _, s := range poisons {
			if !l.committedBeyond(s.stream, s.n) {
				return true // the hold-back is exercised only with a later message
			}
		}
		return false
	}
	for waiting() {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d poison messages were dead-lettered within %v", len(entries), len(poisons), sz.recoverLimit)
		}
		<-tick.C
		es, err := st.DLQ().List(ctx, &dlq.Filters{Destination: destination})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if _, ok := poisons[e.MessageID]; ok {
				entries[e.MessageID] = e
			}
		}
	}
	blocked, err := st.BlockedStreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	beyond := 0
	for _, s := range poisons {
		beyond += l.arrivedBeyond(s.stream, s.n)
	}
	if beyond > 0 {
		t.Errorf("%d later messages of the poisoned strict streams arrived while their poison message was dead-lettered", beyond)
	}
	// The operator acts.
	p.end = time.Now()
	replayed, released := 0, 0
	for id, s := range poisons {
		e := entries[id]
		if replayed <= released {
			rc.fix(id)
			if err := st.DLQ().Replay(ctx, e.ID); err != nil {
				t.Fatalf("replay %s: %v", e.ID, err)
			}
			replayed++
			continue
		}
		l.release(id)
		if _, err := st.ReleaseStream(ctx, destination, s.stream); err != nil {
			t.Fatalf("release %s: %v", s.stream, err)
		}
		if err := st.DLQ().Resolve(ctx, e.ID, "released: the destination will never accept it"); err != nil {
			t.Fatalf("resolve %s: %v", e.ID, err)
		}
		released++
	}
	*held = nil
	p.note = fmt.Sprintf("%d dead-lettered in %v, %d streams blocked, %d later messages leaked past; then %d replayed after a fix, %d released",
		len(entries), p.end.Sub(p.start).Round(time.Millisecond), blocked, beyond, replayed, released)
	settle(p)
	rep.add(p)
	return poisons
}

// finalChecks stops the relays and gathers the store's figures.
func finalChecks(t *testing.T, ctx context.Context, st store.Store, f *fleet, rc *receiver, l *ledger, rep *report, poisons map[string]*sent) {
	t.Helper()
	blocked, err := st.BlockedStreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	es, err := st.DLQ().List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	outage := 0
	var outageNotes []string
	for _, e := range es {
		if _, ok := poisons[e.MessageID]; !ok {
			outage++
			if len(outageNotes) < 5 {
				outageNotes = append(outageNotes, fmt.Sprintf("%s %s: %s", e.FailureReason, e.Stream, e.ErrorMessage))
			}
		}
	}
	bad := f.stopAll(15 * time.Second)
	rep.v = l.check()
	rep.attribute()
	rep.checked = true
	rejected, badSigs, cut := rc.stats()
	rep.fact("**dead letters caused by the faults**", "%d %v", outage, outageNotes)
	rep.fact("**strict streams left blocked**", "%d", blocked)
	rep.fact("poison messages dead-lettered", "%d", len(poisons))
	rep.fact("relay processes started (restarts after kills included)", "%d", f.starts)
	rep.fact("relay exits the test did not cause (restarted as a supervisor would)", "%d %v", len(f.unexpectedExits()), f.unexpectedExits())
	rep.fact("relays not stopping cleanly on SIGTERM", "%d %v", len(bad), bad)
	rep.fact("answers other than 2xx, by status", "%v", rejected)
	rep.fact("requests with a bad signature", "%d", badSigs)
	rep.fact("requests whose body never came whole (a send refused by the relay's lease guard, or a relay killed mid-request)", "%d", cut)
	rep.fact("relay log lines at ERROR", "%d", f.logLines(`"level":"ERROR"`))
	if outage > 0 {
		t.Errorf("%d dead letters caused by the faults: %v", outage, outageNotes)
	}
	if blocked > 0 {
		t.Errorf("%d strict streams left blocked", blocked)
	}
	if badSigs > 0 {
		t.Errorf("%d requests failed signature verification", badSigs)
	}
}

// assertVerdict fails the test on a lost message, an order violation or
// a stale re-send (a duplicate arriving after a later message of its
// stream: a strict stream's worker does not send a message before the
// store has recorded the delivery of the one before it, so a relay
// stalled past its lease cannot have sent a later message that another
// instance's re-send of an earlier one then overtakes), and logs the
// duplicates, which at-least-once delivery allows.
func assertVerdict(t *testing.T, rep *report) {
	t.Helper()
	v := rep.v
	if v.Lost > 0 {
		t.Errorf("%d messages lost, such as %v", v.Lost, v.LostIDs)
	}
	if v.OrderViolations > 0 {
		t.Errorf("%d order violations: %v", v.OrderViolations, v.ViolationNotes)
	}
	if v.Phantom > 0 {
		t.Errorf("%d arrivals of messages never committed: %v", v.Phantom, v.PhantomNotes)
	}
	if v.Stale > 0 {
		t.Errorf("%d stale re-sends (a duplicate arriving after a later message of its stream), by sender %v", v.Stale, v.StaleBy)
	}
	for _, p := range rep.phases {
		if p.noDups && p.dups > 0 {
			t.Errorf("%s: %d duplicates, where every relay held its leases: %v", p.name, p.dups, p.dupNotes)
		}
	}
	if v.Unique == 0 {
		t.Error("nothing arrived")
	}
	t.Logf("reported, not asserted: %d duplicates", v.Duplicates)
}
