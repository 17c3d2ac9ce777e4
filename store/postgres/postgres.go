package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/internal/clockstep"
)

// Store is the PostgreSQL store. It is safe for concurrent use by many
// goroutines, and many processes may share one database: they coordinate
// through row locks and leases.
type Store struct {
	pool  *pgxpool.Pool
	owned bool // Open made the pool; Close closes it
	cfg   store.Config
	n     names
	sql   statements
	life  lifecycleStatements
	dlq   *deadLetters

	// policyDests and policyModes list the destinations with a policy of
	// their own and its ordering mode, the claim's $7 and $8.
	policyDests, policyModes []string

	// badCircuits logs the circuits rows Circuits reads past.
	badCircuits store.CircuitWarnings

	// steps tells RebaseSchedules when the clock was stepped back.
	steps clockstep.Watch
	// ahead keeps the clock's last reading in ProcessBatch, from which the
	// claim learns that it stepped forward (migration 0036).
	ahead *clockstep.Forward

	// vac is what Vacuum remembers between calls.
	vac vacuumState
	// turns is where the last SweepStreamTurns ended.
	turns turnCursor

	// indexInTxUpTo is the heap size up to which a migration builds an
	// index of its concurrent part in its transaction (smallTable).
	indexInTxUpTo int64
}

var _ store.Store = (*Store)(nil)

// Option adjusts a Store.
type Option func(*options)

type options struct {
	schema string
}

// WithSchema puts Backstop's tables in schema (which must exist) instead of
// the first schema of the connection's search_path. The name may hold only
// a-z, 0-9 and _.
func WithSchema(schema string) Option {
	return func(o *options) { o.schema = schema }
}

// Open connects to the database at connString (a PostgreSQL URL or DSN, as
// pgxpool.ParseConfig takes it) and returns a Store that owns the pool.
// It does not migrate: call Migrate. Its connections probe a silent
// database with TCP keep-alives and give up on one that stops
// acknowledging (TCP_USER_TIMEOUT, on Linux) within about 11 s, and a
// connection idle for over a second is pinged, for at most 2 s
// (pool_ping_timeout overrides it), before it is handed out: after a
// partition, calls fail or find a new connection in seconds rather than
// at their context's limit.
func Open(ctx context.Context, connString string, cfg store.Config, opts ...Option) (*Store, error) {
	pcfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, parseError(err)
	}
	detectDeadConnections(pcfg)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s, err := New(pool, cfg, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// parseError is the error of a connection string that does not parse,
// without the connection string: pgx quotes it whole with only its
// password hidden, so the secret of a query parameter (an API key, a
// setting passed with options=-c) was printed by every command that opens
// a store.
func parseError(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return errors.New("postgres: the connection string does not parse")
	}
	why, ok := strings.CutPrefix(pe.Error(), pgconn.NewParseConfigError(pe.ConnString, "", nil).Error())
	if !ok || why == "" {
		why = "it does not parse"
	}
	return fmt.Errorf("postgres: parse connection string: %s", why)
}

// New returns a Store on an existing pool, which the caller keeps owning:
// Close does not close it. It does not migrate: call Migrate.
func New(pool *pgxpool.Pool, cfg store.Config, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: nil pool")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	for _, r := range o.schema {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return nil, fmt.Errorf("postgres: schema %q may hold only a-z, 0-9 and _", o.schema)
		}
	}
	n := newNames(o.schema, cfg.TablePrefix)
	s := &Store{pool: pool, cfg: cfg, n: n, sql: newStatements(n), life: newLifecycleStatements(n), indexInTxUpTo: smallTable,
		ahead: clockstep.NewForward(clock.MonotonicOf(cfg.Clock))}
	s.dlq = &deadLetters{s: s}
	s.policyDests, s.policyModes = []string{}, []string{}
	for _, d := range sortedKeys(cfg.Policies) {
		s.policyDests = append(s.policyDests, d)
		s.policyModes = append(s.policyModes, string(cfg.Policies[d].Ordering))
	}
	return s, nil
}

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Config returns the store's configuration with its defaults applied.
func (s *Store) Config() store.Config { return s.cfg }

// Close closes the pool when Open made it; otherwise it does nothing.
func (s *Store) Close() error {
	if s.owned {
		s.pool.Close()
	}
	return nil
}

// Channel is the LISTEN/NOTIFY channel on which an insert into the outbox
// announces the destinations that have new messages.
func (s *Store) Channel() string { return s.n.prefix + "outbox" }

// OutboxTable is the outbox table's name as an application writing to it
// with plain SQL must spell it: the table prefix, schema-qualified when
// the store has a schema (WithSchema).
func (s *Store) OutboxTable() string { return s.n.outbox }

// names are the table and function names, with the table prefix and the
// schema applied.
type names struct {
	schema, prefix string
	qual           string // prefix, schema-qualified when a schema is set
	outbox         string
	instances      string
	deadLetters    string
	migrations     string
}

// lockKey is the SQL expression of an advisory lock's key for what (such
// as "migrations"), one per schema and table prefix.
func (n names) lockKey(what string) string {
	schema := "coalesce(current_schema(), '')"
	if n.schema != "" {
		schema = quoteLiteral(n.schema)
	}
	return fmt.Sprintf("hashtextextended(%s || '.%s%s', 0)", schema, n.prefix, what)
}

func newNames(schema, prefix string) names {
	qual := prefix
	if schema != "" {
		qual = pgx.Identifier{schema}.Sanitize() + "." + prefix
	}
	return names{
		schema:      schema,
		prefix:      prefix,
		qual:        qual,
		outbox:      qual + "outbox",
		instances:   qual + "instances",
		deadLetters: qual + "dead_letters",
		migrations:  qual + "migrations",
	}
}

// now returns the time parameter of a statement: the configured clock's
// reading in tests, nil in production so that coalesce($now, now()) lets
// the database clock decide.
func (s *Store) now() *time.Time {
	if s.cfg.Clock == nil {
		return nil
	}
	t := s.cfg.Clock.Now()
	return &t
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
