package difftest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

// The environment variables of a manual run: one seed instead of the
// default ones, and how many steps each seed runs.
const (
	seedEnv  = "BACKSTOP_DIFF_SEED"
	stepsEnv = "BACKSTOP_DIFF_STEPS"
	// traceEnv names a file a failing run writes its whole trace to.
	traceEnv = "BACKSTOP_DIFF_TRACE"
)

// The default run: a few fixed seeds, so that CI is deterministic.
var (
	defaultSeeds = []uint64{1, 2, 3, 4}
	defaultSteps = 160
)

// epoch is the fake clock's start, millisecond-aligned (SQLite keeps
// milliseconds).
var epoch = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

// The destinations: ds strict, dr release, dn none, dx the default policy
// (strict). Streams "" are unordered.
var (
	dests     = []string{"ds", "dr", "dn", "dx"}
	streams   = []string{"a", "b", "c", ""}
	instances = []string{"i1", "i2", "i3"}
)

// linear waits n times d before retry n: no jitter, so both stores
// schedule the same times.
type linear time.Duration

func (l linear) Delay(n int) time.Duration { return time.Duration(n) * time.Duration(l) }

func config(clk clock.Clock, retention time.Duration) store.Config {
	return store.Config{
		DefaultPolicy: store.Policy{Strategy: linear(10 * time.Second), MaxAttempts: 4, Ordering: outbox.OrderingStrict},
		Policies: map[string]store.Policy{
			"ds": {Strategy: linear(10 * time.Second), MaxAttempts: 4, Ordering: outbox.OrderingStrict},
			"dr": {Strategy: linear(15 * time.Second), MaxAttempts: 3, Ordering: outbox.OrderingRelease},
			"dn": {Strategy: linear(5 * time.Second), MaxAttempts: 3, Ordering: outbox.OrderingNone},
		},
		LeaseDuration:   30 * time.Second,
		InstanceTimeout: 60 * time.Second,
		Retention:       retention,
		Clock:           clk,
	}
}

// row is what the test reads of one outbox row, the same way from both
// stores.
type row struct {
	id                        uuid.UUID
	seq                       int64
	dest, stream, ordering    string
	status                    int64
	attempts                  int64
	instance                  string
	lease, sched              time.Time // zero: NULL
	dead, released, published bool
}

// side is one store under test.
type side struct {
	name string
	s    store.Store
	rows func(ctx context.Context) ([]row, error)
}

const rowsSQL = `SELECT %s, seq, destination, stream, coalesce(ordering, ''), status, attempts, coalesce(instance_id, ''),
  lease_expiry, scheduled_for, dead_lettered_at IS NOT NULL, stream_released_at IS NOT NULL, published_at IS NOT NULL
FROM backstop_outbox ORDER BY seq`

func openSQLite(t *testing.T, cfg store.Config) *side {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "backstop.db"), cfg)
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return &side{name: "sqlite", s: s, rows: func(ctx context.Context) ([]row, error) {
		rs, err := s.DB().QueryContext(ctx, fmt.Sprintf(rowsSQL, "id"))
		if err != nil {
			return nil, err
		}
		defer rs.Close()
		var out []row
		for rs.Next() {
			var (
				r            row
				id           string
				lease, sched sql.NullInt64
			)
			if err := rs.Scan(&id, &r.seq, &r.dest, &r.stream, &r.ordering, &r.status, &r.attempts, &r.instance,
				&lease, &sched, &r.dead, &r.released, &r.published); err != nil {
				return nil, err
			}
			if r.id, err = uuid.Parse(id); err != nil {
				return nil, err
			}
			if lease.Valid {
				r.lease = time.UnixMilli(lease.Int64).UTC()
			}
			if sched.Valid {
				r.sched = time.UnixMilli(sched.Int64).UTC()
			}
			out = append(out, r)
		}
		return out, rs.Err()
	}}
}

func openPostgres(t *testing.T, cfg store.Config) *side {
	t.Helper()
	schema := testenv.NewSchema(t, "diff_")
	pcfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	pcfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, cfg)
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return &side{name: "postgres", s: s, rows: func(ctx context.Context) ([]row, error) {
		rs, err := pool.Query(ctx, fmt.Sprintf(rowsSQL, "id::text"))
		if err != nil {
			return nil, err
		}
		defer rs.Close()
		var out []row
		for rs.Next() {
			var (
				r            row
				id           string
				lease, sched *time.Time
			)
			if err := rs.Scan(&id, &r.seq, &r.dest, &r.stream, &r.ordering, &r.status, &r.attempts, &r.instance,
				&lease, &sched, &r.dead, &r.released, &r.published); err != nil {
				return nil, err
			}
			if r.id, err = uuid.Parse(id); err != nil {
				return nil, err
			}
			if lease != nil {
				r.lease = lease.UTC()
			}
			if sched != nil {
				r.sched = sched.UTC()
			}
			out = append(out, r)
		}
		return out, rs.Err()
	}}
}

// TestDifferential runs the default seeds (or BACKSTOP_DIFF_SEED) for
// defaultSteps steps each (or BACKSTOP_DIFF_STEPS) against SQLite and
// PostgreSQL. Without PostgreSQL it skips, and fails under CI=true.
func TestDifferential(t *testing.T) {
	testenv.PostgresAdmin(t)
	seeds, steps := defaultSeeds, defaultSteps
	if v := os.Getenv(seedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, v, err)
		}
		seeds = []uint64{n}
	}
	if v := os.Getenv(stepsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", stepsEnv, v)
		}
		steps = n
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			t.Logf("seed %d, %d steps (rerun: %s=%d %s=%d)", seed, steps, seedEnv, seed, stepsEnv, steps)
			run(t, seed, steps)
		})
	}
}

// differ drives both stores with the same operations.
type differ struct {
	t     *testing.T
	ctx   context.Context
	seed  uint64
	rng   *rand.Rand
	clk   *clock.Fake
	cfg   store.Config
	sides [2]*side
	// label names each message by the order it was written, for the trace.
	label map[uuid.UUID]string
	n     int
	// pairs are the (destination, stream) pairs written, in order.
	pairs [][2]string
	seen  map[[2]string]bool
	trace []string
	step  int
	// rows is the state both stores agreed on after the last step.
	rows []row
	// beats are the instances' last heart-beats (every batch beats its
	// instance): a batch declares those silent for longer than
	// InstanceTimeout dead and frees their leases before it claims.
	beats map[string]time.Time
}

func run(t *testing.T, seed uint64, steps int) {
	clk := clock.NewFake(epoch)
	retention := time.Duration(0)
	if seed%2 == 0 {
		retention = time.Hour // published rows stay: claims must pass them over
	}
	cfg := config(clk, retention)
	d := &differ{
		t: t, ctx: context.Background(), seed: seed,
		rng:   rand.New(rand.NewPCG(seed, 0x5eed)),
		clk:   clk,
		cfg:   cfg.WithDefaults(),
		sides: [2]*side{openSQLite(t, cfg), openPostgres(t, cfg)},
		label: map[uuid.UUID]string{},
		seen:  map[[2]string]bool{},
		beats: map[string]time.Time{},
	}
	d.check()
	for d.step = 1; d.step <= steps; d.step++ {
		d.randomStep()
		d.check()
	}
	d.drain()
}

func (d *differ) logf(format string, args ...any) {
	d.trace = append(d.trace, fmt.Sprintf("%4d t+%-6s ", d.step, d.clk.Now().Sub(epoch))+fmt.Sprintf(format, args...))
}

// fatalf fails the run with the seed and the end of the trace.
func (d *differ) fatalf(format string, args ...any) {
	d.t.Helper()
	tail := d.trace
	if f := os.Getenv(traceEnv); f != "" {
		_ = os.WriteFile(f, []byte(strings.Join(d.trace, "\n")+"\n"), 0o644)
	}
	if len(tail) > 80 {
		tail = tail[len(tail)-80:]
	}
	d.t.Fatalf("seed %d step %d: %s\ntrace (last %d operations):\n%s", d.seed, d.step, fmt.Sprintf(format, args...),
		len(tail), strings.Join(tail, "\n"))
}

func (d *differ) randomStep() {
	w := d.rng.IntN(100)
	switch {
	case w < 20:
		d.enqueue()
	case w < 42:
		d.claim(false)
	case w < 48:
		d.claim(true)
	case w < 72:
		d.outcomes()
	case w < 85:
		d.advance()
	case w < 90:
		d.releaseStream()
	case w < 96:
		d.replay()
	default:
		d.deadLetterByHand()
	}
}

// newID is a UUIDv7-shaped id drawn from the seed, the same in both stores.
func (d *differ) newID() uuid.UUID {
	var u uuid.UUID
	for i := range u {
		u[i] = byte(d.rng.IntN(256))
	}
	u[6] = u[6]&0x0f | 0x70
	u[8] = u[8]&0x3f | 0x80
	return u
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// enqueue writes a batch of 1 to 6 messages over the destinations and
// streams, or now and then a burst of 20 to 45 into one stream, so that
// streams grow deeper than a claim's read of them.
func (d *differ) enqueue() {
	k := 1 + d.rng.IntN(6)
	burst := d.rng.IntN(100) < 8
	var bdest, bstream string
	if burst {
		k = 20 + d.rng.IntN(26)
		bdest, bstream = pick(d.rng, dests), pick(d.rng, streams[:3])
	}
	var proto []outbox.Message
	var desc []string
	for range k {
		d.n++
		m := outbox.Message{
			ID:          d.newID(),
			Destination: pick(d.rng, dests),
			Stream:      pick(d.rng, streams),
			Type:        fmt.Sprintf("m%d", d.n),
			Payload:     []byte(`{}`),
		}
		if burst {
			m.Destination, m.Stream = bdest, bstream
		}
		if d.rng.IntN(100) < 15 {
			m.Ordering = pick(d.rng, []outbox.Ordering{outbox.OrderingStrict, outbox.OrderingRelease, outbox.OrderingNone})
		}
		if d.rng.IntN(100) < 10 {
			m.ScheduledFor = d.clk.Now().Add(time.Duration(1+d.rng.IntN(5)) * 10 * time.Second)
		}
		d.label[m.ID] = m.Type
		p := [2]string{m.Destination, m.Stream}
		if !d.seen[p] {
			d.seen[p] = true
			d.pairs = append(d.pairs, p)
		}
		s := fmt.Sprintf("%s=%s/%s", m.Type, m.Destination, m.Stream)
		if m.Ordering != "" {
			s += "(" + string(m.Ordering) + ")"
		}
		if !m.ScheduledFor.IsZero() {
			s += "@+" + m.ScheduledFor.Sub(d.clk.Now()).String()
		}
		desc = append(desc, s)
		proto = append(proto, m)
	}
	d.logf("enqueue %s", strings.Join(desc, " "))
	for _, sd := range d.sides {
		ms := make([]*outbox.Message, len(proto))
		for i := range proto {
			m := proto[i]
			ms[i] = &m
		}
		if err := sd.s.Enqueue(d.ctx, ms...); err != nil {
			d.fatalf("%s: Enqueue: %v", sd.name, err)
		}
	}
}

// claimReq draws a claim: a limit of 1, 3 or 50, sometimes restricted to
// destinations, excluding some, or capped per destination.
func (d *differ) claimReq(all bool) store.ClaimRequest {
	if all {
		return store.ClaimRequest{Limit: 10000}
	}
	req := store.ClaimRequest{Limit: pick(d.rng, []int{1, 3, 50})}
	switch r := d.rng.IntN(100); {
	case r < 10:
		req.Destinations = []string{pick(d.rng, dests), pick(d.rng, dests)}
	case r < 20:
		req.Destinations = []string{pick(d.rng, dests)}
	case r < 25:
		req.ExcludeDestinations = []string{pick(d.rng, dests)}
	case r < 45:
		req.PerDestination = map[string]int{}
		for _, dest := range dests {
			if d.rng.IntN(2) == 0 {
				req.PerDestination[dest] = d.rng.IntN(3)
			}
		}
	}
	if d.rng.IntN(100) < 15 {
		req.Lease = time.Duration(5+d.rng.IntN(115)) * time.Second
	}
	return req
}

func reqString(r store.ClaimRequest) string {
	s := fmt.Sprintf("limit=%d", r.Limit)
	if r.Lease != 0 {
		s += " lease=" + r.Lease.String()
	}
	if len(r.Destinations) > 0 {
		s += fmt.Sprintf(" only=%v", r.Destinations)
	}
	if len(r.ExcludeDestinations) > 0 {
		s += fmt.Sprintf(" exclude=%v", r.ExcludeDestinations)
	}
	if r.PerDestination != nil {
		keys := make([]string, 0, len(r.PerDestination))
		for k := range r.PerDestination {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s:%d", k, r.PerDestination[k]))
		}
		s += " caps=" + strings.Join(parts, ",")
	}
	return s
}

func (d *differ) names(ids []uuid.UUID) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = d.label[id]
		if parts[i] == "" {
			parts[i] = id.String()
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func msgIDs(ms []*outbox.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// claim claims in both stores. Each claim must take only claimable
// messages (the claim rules, computed from the state before it), in seq
// order, within the limit and caps, each stream's in a prefix of its
// claimable ones, and at least one when any is claimable; a claim with
// all set (a limit above everything) must take exactly the claimable set.
// When a binding limit made the stores choose differently, each gives
// back (a Status 0 completion) what the other did not take.
func (d *differ) claim(all bool) {
	inst := pick(d.rng, instances)
	if all {
		inst = "probe"
	}
	req := d.claimReq(all)
	now := d.clk.Now()
	want := claimable(d.cfg, d.rows, now, req, d.deadAt(now, inst))
	d.logf("claim %s %s (claimable %s)", inst, reqString(req), d.names(want))
	var got [2][]uuid.UUID
	var reaped [2]int
	for i, sd := range d.sides {
		res, err := d.process(sd, inst, store.Batch{Claim: req})
		if err != nil {
			d.fatalf("%s: ProcessBatch(claim): %v", sd.name, err)
		}
		if len(res.Rejected) > 0 || len(res.Quarantined) > 0 {
			d.fatalf("%s: claim rejected %v, quarantined %v", sd.name, res.Rejected, res.Quarantined)
		}
		got[i] = msgIDs(res.Claimed)
		reaped[i] = res.DeadInstances
		lease := req.Lease
		if lease == 0 {
			lease = d.cfg.LeaseDuration
		}
		for _, m := range res.Claimed {
			if m.InstanceID != inst || !m.LeaseExpiry.Equal(now.Add(lease)) {
				d.fatalf("%s: claimed %s with instance %q lease %v, want %q %v", sd.name, d.label[m.ID],
					m.InstanceID, m.LeaseExpiry, inst, now.Add(lease))
			}
		}
		d.checkClaim(sd.name, req, want, res.Claimed, all)
	}
	d.logf("  sqlite took %s, postgres took %s", d.names(got[0]), d.names(got[1]))
	if reaped[0] != reaped[1] {
		d.fatalf("the claim declared %d instances dead on sqlite, %d on postgres", reaped[0], reaped[1])
	}
	if slices.Equal(sortedIDs(got[0]), sortedIDs(got[1])) {
		return
	}
	if all {
		d.fatalf("the stores claimed different sets:\nsqlite   %s\npostgres %s", d.names(got[0]), d.names(got[1]))
	}
	// Resynchronise: the claimer gives back what only one store took, then
	// each earlier holder (whose lease had lapsed) gives it back too, so
	// that it ends free in both. Each batch goes to both stores, keeping
	// the instances' heart-beats alike; what is stale in one is applied in
	// the other.
	var diff []uuid.UUID
	for i := range got {
		for _, id := range got[i] {
			if !slices.Contains(got[1-i], id) {
				diff = append(diff, id)
			}
		}
	}
	holders := []string{inst}
	for _, r := range d.rows {
		if slices.Contains(diff, r.id) && r.instance != "" && !slices.Contains(holders, r.instance) {
			holders = append(holders, r.instance)
		}
	}
	for _, h := range holders {
		cs := make([]store.Completion, len(diff))
		for i, id := range diff {
			cs[i] = store.Completion{ID: id}
		}
		for _, sd := range d.sides {
			res, err := d.process(sd, h, store.Batch{Completions: cs})
			if err != nil || len(res.Rejected) > 0 {
				d.fatalf("%s: give back as %s: %v (rejected %v)", sd.name, h, err, res.Rejected)
			}
		}
	}
	d.logf("  (gave back the difference)")
}

func sortedIDs(ids []uuid.UUID) []uuid.UUID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// checkClaim checks one store's claim against want, the claimable
// messages (in seq order) the claim may take.
func (d *differ) checkClaim(name string, req store.ClaimRequest, want []uuid.UUID, got []*outbox.Message, all bool) {
	ok := map[uuid.UUID]bool{}
	for _, id := range want {
		ok[id] = true
	}
	perDest := map[string]int{}
	taken := map[uuid.UUID]bool{}
	for i, m := range got {
		if !ok[m.ID] {
			d.fatalf(d.streamRows(m.Destination, m.Stream)+"\n"+"%s claimed %s (%s/%s), which the claim rules hold back or which is not claimable; claimable %s",
				name, d.label[m.ID], m.Destination, m.Stream, d.names(want))
		}
		if i > 0 && m.Seq <= got[i-1].Seq {
			d.fatalf("%s claimed out of seq order: %s", name, d.names(msgIDs(got)))
		}
		taken[m.ID] = true
		perDest[m.Destination]++
	}
	if len(got) > req.Limit {
		d.fatalf("%s claimed %d, over the limit %d", name, len(got), req.Limit)
	}
	for dest, n := range perDest {
		if c, capped := req.PerDestination[dest]; capped && n > c {
			d.fatalf("%s claimed %d of %s, over its cap %d", name, n, dest, c)
		}
	}
	if len(want) > 0 && req.Limit > 0 && len(got) == 0 {
		d.fatalf("%s claimed nothing with limit %d, but %s are claimable", name, req.Limit, d.names(want))
	}
	if all && len(got) != len(want) {
		d.fatalf("%s claimed %s with a limit above everything, want all claimable %s", name, d.names(msgIDs(got)), d.names(want))
	}
	// Within a stream, the ordered messages taken are the first claimable
	// ones: none overtakes an earlier claimable one left behind.
	byID := map[uuid.UUID]row{}
	for _, r := range d.rows {
		byID[r.id] = r
	}
	left := map[[2]string]uuid.UUID{}
	for _, id := range want {
		r := byID[id]
		if r.stream == "" || r.ordering == "none" {
			continue
		}
		k := [2]string{r.dest, r.stream}
		if !taken[id] {
			if _, seen := left[k]; !seen {
				left[k] = id
			}
			continue
		}
		if l, seen := left[k]; seen {
			d.fatalf(d.streamRows(r.dest, r.stream)+"\n%s claimed %s of stream %s/%s but left the earlier claimable %s", name, d.label[id], r.dest, r.stream, d.label[l])
		}
	}
}

// process runs b as inst on sd and records inst's heart-beat.
func (d *differ) process(sd *side, inst string, b store.Batch) (*store.Result, error) {
	b.Instance = store.Instance{ID: inst}
	d.beats[inst] = d.clk.Now()
	return sd.s.ProcessBatch(d.ctx, &b)
}

// deadAt says which instances a batch of inst at now declares dead.
func (d *differ) deadAt(now time.Time, inst string) func(string) bool {
	return func(i string) bool {
		b, ok := d.beats[i]
		return i != inst && ok && now.Sub(b) > d.cfg.InstanceTimeout
	}
}

// eff is a row's effective ordering.
func eff(cfg store.Config, r row) string {
	if r.ordering != "" {
		return r.ordering
	}
	return string(cfg.PolicyFor(r.dest).Ordering)
}

// claimable are the ids, in seq order, that req may claim at now: the
// claim rules of package store read on rows.
func claimable(cfg store.Config, rows []row, now time.Time, req store.ClaimRequest, dead func(string) bool) []uuid.UUID {
	liveLease := func(r row) bool { return r.instance != "" && r.lease.After(now) && !dead(r.instance) }
	holds := func(e row) bool {
		if e.published {
			return false
		}
		m := eff(cfg, e)
		if liveLease(e) {
			return m != "none"
		}
		if m != "strict" || e.released {
			return false
		}
		return e.dead || (!e.sched.IsZero() && e.sched.After(now))
	}
	allowed := func(dest string) bool {
		if len(req.Destinations) > 0 && !slices.Contains(req.Destinations, dest) {
			return false
		}
		if slices.Contains(req.ExcludeDestinations, dest) {
			return false
		}
		if c, ok := req.PerDestination[dest]; ok && c <= 0 {
			return false
		}
		return req.Limit > 0
	}
	held := map[[2]string]bool{} // streams held so far (rows are in seq order)
	var out []uuid.UUID
	for _, r := range rows {
		k := [2]string{r.dest, r.stream}
		ok := !r.published && !r.dead && !liveLease(r) && (r.sched.IsZero() || !r.sched.After(now))
		if ok && r.stream != "" && r.ordering != "none" && held[k] {
			ok = false
		}
		if ok && allowed(r.dest) {
			out = append(out, r.id)
		}
		if r.stream != "" && holds(r) {
			held[k] = true
		}
	}
	return out
}

// leasedRows are the rows a relay holds (instance set, not published).
func (d *differ) leasedRows() []row {
	var out []row
	for _, r := range d.rows {
		if r.instance != "" && !r.published {
			out = append(out, r)
		}
	}
	return out
}

// outcomes sends one batch of outcomes from one instance: mostly for
// messages it holds, sometimes for others' (stale).
func (d *differ) outcomes() {
	inst := pick(d.rng, instances)
	leased := d.leasedRows()
	if len(leased) == 0 {
		d.claim(false)
		return
	}
	var mine []row
	for _, r := range leased {
		if r.instance == inst {
			mine = append(mine, r)
		}
	}
	pool := leased
	if len(mine) > 0 && d.rng.IntN(100) < 85 {
		pool = mine
	}
	k := 1 + d.rng.IntN(min(6, len(pool)))
	perm := d.rng.Perm(len(pool))[:k]
	var b store.Batch
	var desc []string
	for _, i := range perm {
		r := pool[i]
		l := d.label[r.id]
		switch x := d.rng.IntN(100); {
		case x < 40:
			b.Completions = append(b.Completions, store.Completion{ID: r.id, Status: outbox.StatusPublished})
			desc = append(desc, "publish "+l)
		case x < 48:
			b.Completions = append(b.Completions, store.Completion{ID: r.id})
			desc = append(desc, "give-back "+l)
		case x < 52:
			b.Completions = append(b.Completions, store.Completion{ID: r.id, Status: outbox.StatusEventStored})
			desc = append(desc, "flag "+l)
		case x < 72:
			f := store.Failure{ID: r.id, Error: "boom", Reason: errorhandling.ReasonTransportUnavailable}
			if d.rng.IntN(4) == 0 {
				f.RetryAfter = time.Duration(1+d.rng.IntN(6)) * 10 * time.Second
			}
			b.Failures = append(b.Failures, f)
			desc = append(desc, fmt.Sprintf("fail %s(after %s)", l, f.RetryAfter))
		case x < 80:
			b.Failures = append(b.Failures, store.Failure{ID: r.id, Error: "bad", Permanent: true})
			desc = append(desc, "fail-permanently "+l)
		case x < 92:
			rel := store.Release{ID: r.id}
			if d.rng.IntN(2) == 0 {
				rel.After = time.Duration(1+d.rng.IntN(4)) * 10 * time.Second
			}
			b.Releases = append(b.Releases, rel)
			desc = append(desc, fmt.Sprintf("release %s(after %s)", l, rel.After))
		default:
			b.RenewLeases = append(b.RenewLeases, r.id)
			desc = append(desc, "renew "+l)
		}
	}
	d.logf("batch %s: %s", inst, strings.Join(desc, ", "))
	var res [2]*store.Result
	for i, sd := range d.sides {
		r, err := d.process(sd, inst, b)
		if err != nil {
			d.fatalf("%s: ProcessBatch(outcomes): %v", sd.name, err)
		}
		if len(r.Rejected) > 0 {
			d.fatalf("%s: rejected %v", sd.name, r.Rejected)
		}
		res[i] = r
	}
	for _, f := range []struct {
		what string
		get  func(*store.Result) []uuid.UUID
	}{
		{"DeadLettered", func(r *store.Result) []uuid.UUID { return r.DeadLettered }},
		{"Stale", func(r *store.Result) []uuid.UUID { return r.Stale }},
		{"Renewed", func(r *store.Result) []uuid.UUID {
			var out []uuid.UUID
			for _, l := range r.Renewed {
				out = append(out, l.ID)
			}
			return out
		}},
	} {
		a, p := sortedIDs(f.get(res[0])), sortedIDs(f.get(res[1]))
		if !slices.Equal(a, p) {
			d.fatalf("%s differ: sqlite %s, postgres %s", f.what, d.names(a), d.names(p))
		}
	}
	exp := map[uuid.UUID]time.Time{}
	for _, l := range res[0].Renewed {
		exp[l.ID] = l.Expiry
	}
	for _, l := range res[1].Renewed {
		if !exp[l.ID].Equal(l.Expiry) {
			d.fatalf("renewed %s to %v on sqlite, %v on postgres", d.label[l.ID], exp[l.ID], l.Expiry)
		}
	}
}

var advances = []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, 31 * time.Second, 61 * time.Second, 2 * time.Minute}

func (d *differ) advance() {
	by := pick(d.rng, advances)
	d.clk.Advance(by)
	d.logf("advance %s", by)
}

func (d *differ) releaseStream() {
	if len(d.pairs) == 0 {
		return
	}
	p := pick(d.rng, d.pairs)
	if p[1] == "" {
		return
	}
	d.logf("ReleaseStream %s/%s", p[0], p[1])
	var n [2]int
	for i, sd := range d.sides {
		var err error
		if n[i], err = sd.s.ReleaseStream(d.ctx, p[0], p[1]); err != nil {
			d.fatalf("%s: ReleaseStream: %v", sd.name, err)
		}
	}
	if n[0] != n[1] {
		d.fatalf("ReleaseStream(%s, %s) released %d on sqlite, %d on postgres", p[0], p[1], n[0], n[1])
	}
}

// pendingEntry is the pending dead-letter entry of message id, or "".
func (d *differ) pendingEntry(sd *side, r row) string {
	es, err := sd.s.DLQ().List(d.ctx, &dlq.Filters{Destination: r.dest, Stream: r.stream, Status: dlq.StatusPending})
	if err != nil {
		d.fatalf("%s: DLQ List: %v", sd.name, err)
	}
	for _, e := range es {
		if e.MessageID == r.id.String() && e.Status == dlq.StatusPending {
			return e.ID
		}
	}
	return ""
}

// replay replays the pending entry of a dead-lettered message.
func (d *differ) replay() {
	var dead []row
	for _, r := range d.rows {
		if r.dead && !r.published {
			dead = append(dead, r)
		}
	}
	if len(dead) == 0 {
		return
	}
	r := pick(d.rng, dead)
	d.replayRow(r)
}

func (d *differ) replayRow(r row) {
	d.logf("replay %s", d.label[r.id])
	var errs [2]error
	for i, sd := range d.sides {
		e := d.pendingEntry(sd, r)
		if e == "" {
			errs[i] = dlq.ErrNotFound
			continue
		}
		errs[i] = sd.s.DLQ().Replay(d.ctx, e)
	}
	if !sameErr(errs[0], errs[1]) {
		d.fatalf("replay %s: sqlite %v, postgres %v", d.label[r.id], errs[0], errs[1])
	}
	if errs[0] != nil {
		d.logf("  -> %v", errs[0])
	}
}

var sentinels = []error{dlq.ErrNotFound, dlq.ErrAlreadyReplayed, dlq.ErrResolved, dlq.ErrInFlight,
	store.ErrNotFound, store.ErrDeadLettered, store.ErrDelivered, store.ErrLeased}

// sameErr: both nil, or both match the same sentinel.
func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	for _, s := range sentinels {
		if errors.Is(a, s) != errors.Is(b, s) {
			return false
		}
	}
	return true
}

func (d *differ) deadLetterByHand() {
	var live []row
	for _, r := range d.rows {
		if !r.published {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return
	}
	r := pick(d.rng, live)
	d.logf("DeadLetter by hand %s", d.label[r.id])
	var errs [2]error
	for i, sd := range d.sides {
		errs[i] = sd.s.DeadLetter(d.ctx, r.id, "by hand")
	}
	if !sameErr(errs[0], errs[1]) {
		d.fatalf("DeadLetter %s: sqlite %v, postgres %v", d.label[r.id], errs[0], errs[1])
	}
}

// check reads both stores and requires them to hold the same messages in
// the same states and seq order.
func (d *differ) check() {
	d.t.Helper()
	var rows [2][]row
	for i, sd := range d.sides {
		var err error
		if rows[i], err = sd.rows(d.ctx); err != nil {
			d.fatalf("%s: read rows: %v", sd.name, err)
		}
	}
	if len(rows[0]) != len(rows[1]) {
		d.fatalf("sqlite holds %d rows, postgres %d", len(rows[0]), len(rows[1]))
	}
	for i := range rows[0] {
		a, p := rows[0][i], rows[1][i]
		if a.id != p.id {
			d.fatalf("row %d in seq order: sqlite %s, postgres %s", i, d.label[a.id], d.label[p.id])
		}
		if diff := diffRows(a, p); diff != "" {
			d.fatalf("message %s (%s/%s) differs: %s", d.label[a.id], a.dest, a.stream, diff)
		}
	}
	d.rows = rows[0]
}

func diffRows(a, p row) string {
	var out []string
	f := func(what string, x, y any) {
		if x != y {
			out = append(out, fmt.Sprintf("%s: sqlite %v, postgres %v", what, x, y))
		}
	}
	f("destination", a.dest, p.dest)
	f("stream", a.stream, p.stream)
	f("ordering", a.ordering, p.ordering)
	f("status", a.status, p.status)
	f("attempts", a.attempts, p.attempts)
	f("instance", a.instance, p.instance)
	if a.instance != "" || p.instance != "" {
		f("lease_expiry", a.lease.UnixMilli(), p.lease.UnixMilli())
	}
	f("scheduled_for", a.sched.UnixMilli(), p.sched.UnixMilli())
	f("dead-lettered", a.dead, p.dead)
	f("stream released", a.released, p.released)
	f("published", a.published, p.published)
	return strings.Join(out, "; ")
}

// drain checks that no stream is stuck: with every stream released, the
// clock past every retry and lease, and everything claimed published,
// repeated claims take every message that is not dead-lettered; then,
// every dead letter replayed, they take those too.
func (d *differ) drain() {
	d.step++
	for _, p := range d.pairs {
		if p[1] == "" {
			continue
		}
		d.logf("drain: ReleaseStream %s/%s", p[0], p[1])
		for _, sd := range d.sides {
			if _, err := sd.s.ReleaseStream(d.ctx, p[0], p[1]); err != nil {
				d.fatalf("%s: ReleaseStream: %v", sd.name, err)
			}
		}
	}
	d.check()
	d.drainClaims()
	var dead []row
	for _, r := range d.rows {
		if !r.published {
			if !r.dead {
				d.fatalf("drain left %s (%s/%s) neither published nor dead-lettered", d.label[r.id], r.dest, r.stream)
			}
			dead = append(dead, r)
		}
	}
	for _, r := range dead {
		d.replayRow(r)
		d.check()
	}
	d.drainClaims()
	for _, r := range d.rows {
		if !r.published {
			d.fatalf("after replaying every dead letter, %s (%s/%s) is left undelivered", d.label[r.id], r.dest, r.stream)
		}
	}
}

// drainClaims claims everything claimable and publishes it, the clock
// past every retry and lease, until only dead letters are left.
func (d *differ) drainClaims() {
	for round := 0; ; round++ {
		d.clk.Advance(5 * time.Minute)
		d.logf("drain: advance 5m")
		before := len(d.unfinished())
		if before == 0 {
			return
		}
		if round > 200 {
			d.fatalf("drain does not end: %s left", d.names(d.unfinished()))
		}
		d.claim(true)
		d.check()
		var cs []store.Completion
		for _, r := range d.rows {
			if r.instance == "probe" && !r.published && !r.dead {
				cs = append(cs, store.Completion{ID: r.id, Status: outbox.StatusPublished})
			}
		}
		if len(cs) == 0 {
			d.fatalf("stuck: nothing claimable, but %s are neither published nor dead-lettered", d.names(d.unfinished()))
		}
		d.logf("drain: publish %d", len(cs))
		for _, sd := range d.sides {
			if _, err := d.process(sd, "probe", store.Batch{Completions: cs}); err != nil {
				d.fatalf("%s: publish: %v", sd.name, err)
			}
		}
		d.check()
	}
}

func (d *differ) unfinished() []uuid.UUID {
	var out []uuid.UUID
	for _, r := range d.rows {
		if !r.published && !r.dead {
			out = append(out, r.id)
		}
	}
	return out
}

// streamRows describes the rows of one stream before the step, for a
// failure's message.
func (d *differ) streamRows(dest, stream string) string {
	now := d.clk.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "stream %s/%s before the step (now t+%s):", dest, stream, now.Sub(epoch))
	for _, r := range d.rows {
		if r.dest != dest || r.stream != stream {
			continue
		}
		fmt.Fprintf(&b, "\n  %s seq=%d ordering=%q status=%d attempts=%d", d.label[r.id], r.seq, r.ordering, r.status, r.attempts)
		if r.instance != "" {
			fmt.Fprintf(&b, " leased=%s until t+%s", r.instance, r.lease.Sub(epoch))
		}
		if !r.sched.IsZero() {
			fmt.Fprintf(&b, " scheduled t+%s", r.sched.Sub(epoch))
		}
		if r.dead {
			b.WriteString(" DEAD")
		}
		if r.released {
			b.WriteString(" released")
		}
		if r.published {
			b.WriteString(" published")
		}
	}
	return b.String()
}
