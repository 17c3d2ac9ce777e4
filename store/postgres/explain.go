package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/store"
)

// ExplainClaim returns PostgreSQL's plans for a claim of limit messages
// (all destinations, the store's lease and policies): the call of the claim
// function, then each statement the function ran, as auto_explain reports
// them. With analyze they carry timings and buffers (EXPLAIN (ANALYZE,
// BUFFERS)). The claim runs in a transaction that is rolled back, so
// nothing is leased. Operators use it to see that a claim reads stream
// heads and the partial indexes, never the backlog.
//
// The statements' plans need auto_explain, which only a superuser can
// LOAD (or the server preloads): without it only the call's plan is
// returned, with a note.
func (s *Store) ExplainClaim(ctx context.Context, limit int, analyze bool) (string, error) {
	plan, err := s.explainClaim(ctx, store.ClaimRequest{Limit: limit}, analyze)
	if err != nil {
		return "", fmt.Errorf("postgres: explain claim: %w", err)
	}
	return plan, nil
}

// explainClaim is ExplainClaim of a claim of req (its Limit, Destinations,
// ExcludeDestinations and PerDestination).
func (s *Store) explainClaim(ctx context.Context, req store.ClaimRequest, analyze bool) (string, error) {
	var (
		mu      sync.Mutex
		notices []string
	)
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		notices = append(notices, n.Message)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	on := "off"
	if analyze {
		on = "on"
	}
	nested := true
	if _, err := conn.Exec(ctx, "LOAD 'auto_explain'"); err != nil {
		nested = false
	}
	var outer []string
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if nested {
			for _, q := range []string{
				"SET LOCAL auto_explain.log_min_duration = 0",
				"SET LOCAL auto_explain.log_nested_statements = on",
				"SET LOCAL auto_explain.log_analyze = " + on,
				"SET LOCAL auto_explain.log_buffers = " + on,
				"SET LOCAL auto_explain.log_timing = " + on,
				"SET LOCAL client_min_messages = log",
			} {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
		}
		opts := "EXPLAIN (COSTS OFF) "
		if analyze {
			opts = "EXPLAIN (ANALYZE, BUFFERS) "
		}
		args := append([]any{nil, "explain", req.Limit, micros(s.cfg.LeaseDuration)}, s.claimArgs(req)...)
		rows, err := tx.Query(ctx, opts+s.sql.claim, args...)
		if err != nil {
			return err
		}
		if outer, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		if !analyze && nested {
			// auto_explain reports statements that ran: run the claim.
			rows, err := tx.Query(ctx, s.sql.claim, args...)
			if err != nil {
				return err
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return errRollback
	})
	if err != nil && !errors.Is(err, errRollback) {
		return "", err
	}
	var b strings.Builder
	b.WriteString("-- the call\n" + strings.Join(outer, "\n") + "\n")
	if !nested {
		b.WriteString("-- (auto_explain could not be loaded: the function's statements are not shown)\n")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range notices {
		if strings.Contains(n, "Query Text:") && !strings.Contains(n, "EXPLAIN") {
			b.WriteString("-- a statement of the claim function\n" + n + "\n")
		}
	}
	return b.String(), nil
}

// errRollback makes pgx.BeginFunc roll back.
var errRollback = errors.New("rollback")
