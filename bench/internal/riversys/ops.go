package riversys

import (
	"context"
	"errors"

	"github.com/riverqueue/river"

	"github.com/backstophq/backstop/internal/benchkit/scenario"
)

// subscribeBuffer is the size of the completion subscription's channel:
// River drops events a full channel cannot take, and the benchmark counts
// completions by them, as River's benchmark does.
const subscribeBuffer = 200_000

func args(m scenario.Msg) Args { return Args{N: m.N, S: m.Stream, T: m.T} }

// Insert writes one job with Insert, or a batch with InsertMany; each is
// one transaction.
func (s *System) Insert(ctx context.Context, msgs []scenario.Msg) error {
	if len(msgs) == 1 {
		return s.client.insert(ctx, args(msgs[0]))
	}
	params := make([]river.InsertManyParams, len(msgs))
	for i, m := range msgs {
		params[i].Args = args(m)
	}
	return s.client.insertMany(ctx, params)
}

// Preload writes msgs with InsertMany, Settings.InsertBatch at a time.
func (s *System) Preload(ctx context.Context, msgs []scenario.Msg) error {
	for i := 0; i < len(msgs); i += s.settings.InsertBatch {
		if err := s.Insert(ctx, msgs[i:min(i+s.settings.InsertBatch, len(msgs))]); err != nil {
			return err
		}
	}
	return nil
}

// Start subscribes to completions and starts the client; its worker
// returns what h returns, so a deliberate failure is retried by River's
// default retry policy.
func (s *System) Start(ctx context.Context, h scenario.Handler) error {
	s.handler.Store(&h)
	events, cancel := s.client.subscribe(&river.SubscribeConfig{
		ChanSize: subscribeBuffer,
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
	})
	go func() {
		defer cancel()
		for ev := range events {
			if ev.Kind == river.EventKindJobCompleted {
				s.completed.Add(1)
			}
		}
	}()
	return s.client.start(ctx)
}

// Completed counts the job-completed events River has sent: jobs whose
// completion its completer has written.
func (s *System) Completed() int64 { return s.completed.Load() }

// Stop stops the client, waiting for jobs in progress.
func (s *System) Stop(ctx context.Context) error {
	err := s.client.stop(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Close closes the database pool.
func (s *System) Close() error {
	s.closeDB()
	return nil
}
