// Package backstopsys runs Backstop under the benchmark: its PostgreSQL or
// SQLite store opened with a zero store.Config (but for its logger), and a relay with a no-op
// Go handler, either with the default relay.Config (what users run) or
// with the tuned settings of tuned.go.
package backstopsys

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport"

	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

// Destination is the name of the one destination the benchmark delivers to.
const Destination = "bench"

// preloadChunk is how many messages one Enqueue call writes when a
// backlog is preloaded (the relay's own benchmarks use the same).
const preloadChunk = 1000

// System is Backstop under test.
type System struct {
	st     store.Store
	pg     *postgres.Store // when on PostgreSQL
	lite   *sqlite.Store   // when on SQLite
	tuned  bool
	log    *slog.Logger // env.Logger: where the store and relay log
	relay  *relay.Relay
	cancel context.CancelFunc
	done   chan error
}

var _ scenario.System = (*System)(nil)

// Open opens and migrates a Backstop store in env with a zero
// store.Config. tuned selects the relay settings of tuned.go instead of
// the defaults.
func Open(ctx context.Context, env scenario.Env, tuned bool) (*System, error) {
	s := &System{tuned: tuned, log: env.Logger}
	switch env.Store {
	case scenario.Postgres:
		pg, err := postgres.Open(ctx, env.URL, store.Config{Logger: env.Logger}, postgres.WithSchema(env.Schema))
		if err != nil {
			return nil, err
		}
		if err := pg.Migrate(ctx); err != nil {
			pg.Close()
			return nil, err
		}
		s.st, s.pg = pg, pg
	case scenario.SQLite:
		lite, err := sqlite.Open(ctx, filepath.Join(env.Dir, "backstop.db"), store.Config{Logger: env.Logger})
		if err != nil {
			return nil, err
		}
		s.st, s.lite = lite, lite
	default:
		return nil, fmt.Errorf("backstopsys: unknown store %q", env.Store)
	}
	return s, nil
}

func messages(msgs []scenario.Msg) []*outbox.Message {
	out := make([]*outbox.Message, len(msgs))
	for i, m := range msgs {
		out[i] = &outbox.Message{Destination: Destination, Stream: m.StreamKey(), Type: "bench", Payload: m.Payload()}
	}
	return out
}

// Insert writes msgs with Enqueue, in one transaction of the store's own
// (one autocommit statement on PostgreSQL), as the raw baseline writes
// one INSERT and River's InsertMany its own transaction: no case pays
// for a transaction the benchmark opens around it.
func (s *System) Insert(ctx context.Context, msgs []scenario.Msg) error {
	return s.st.Enqueue(ctx, messages(msgs)...)
}

// Preload writes msgs with Enqueue, preloadChunk a transaction.
func (s *System) Preload(ctx context.Context, msgs []scenario.Msg) error {
	for i := 0; i < len(msgs); i += preloadChunk {
		if err := s.st.Enqueue(ctx, messages(msgs[i:min(i+preloadChunk, len(msgs))])...); err != nil {
			return err
		}
	}
	return nil
}

// Start runs a relay delivering to a Go handler that calls h. A
// deliberate failure is returned as errorhandling.Transient.
func (s *System) Start(ctx context.Context, h scenario.Handler) error {
	deliver := transport.Func(func(ctx context.Context, m *outbox.Message) error {
		msg, err := scenario.ParsePayload(m.Payload)
		if err != nil {
			return errorhandling.Permanent(err)
		}
		if err := h(ctx, msg); err != nil {
			return errorhandling.Transient(err)
		}
		return nil
	})
	cfg := relay.Config{Destinations: map[string]relay.Destination{Destination: {Transport: deliver}}, Logger: s.log}
	if s.tuned {
		cfg = tune(cfg)
	}
	r, err := relay.New(s.st, cfg)
	if err != nil {
		return err
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.relay, s.done = r, make(chan error, 1)
	go func() { s.done <- r.Run(ctx) }()
	return nil
}

// Completed is the relay's count of deliveries the store has recorded.
func (s *System) Completed() int64 {
	if s.relay == nil {
		return 0
	}
	return s.relay.Stats().Delivered
}

// Stop cancels the relay's Run and waits for it to record what it holds.
func (s *System) Stop(context.Context) error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	err := <-s.done
	s.cancel = nil
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Close closes the store.
func (s *System) Close() error { return s.st.Close() }
