package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ExplainClaim returns PostgreSQL's plan for the claim statement with
// limit, as ProcessBatch runs it (prepared, all destinations). With
// analyze it runs the claim (EXPLAIN (ANALYZE, BUFFERS)) inside a
// transaction it rolls back, so nothing is leased. Operators use it to see
// that claims read the partial indexes and not the backlog.
func (s *Store) ExplainClaim(ctx context.Context, limit int, analyze bool) (string, error) {
	return s.explainClaim(ctx, limit, "auto", analyze)
}

// explainClaim is ExplainClaim under plan_cache_mode cacheMode (auto,
// force_custom_plan or force_generic_plan: the pipeline's prepared claim
// is planned generically after five runs).
func (s *Store) explainClaim(ctx context.Context, limit int, cacheMode string, analyze bool) (string, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("postgres: explain claim: %w", err)
	}
	defer conn.Release()
	// PREPARE is not transactional: deallocate after the rollback.
	const name = "backstop_explain_claim"
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE "+name) }()
	var lines []string
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, q := range []string{
			"SET LOCAL plan_cache_mode = " + cacheMode,
			"PREPARE " + name + "(timestamptz, text, int, bigint, text[], text[], text[], text[], text, text[], int[]) AS " + s.sql.claim,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		opts := "EXPLAIN (COSTS OFF) "
		if analyze {
			opts = "EXPLAIN (ANALYZE, BUFFERS) "
		}
		// EXECUTE takes no bind parameters: spell the arguments out.
		args := fmt.Sprintf("NULL, 'explain', %d, %d, '{}', '{}', %s, %s, %s", limit,
			micros(s.cfg.LeaseDuration), textArray(s.policyDests), textArray(s.policyModes),
			quoteLiteral(string(s.cfg.DefaultPolicy.Ordering)))
		args += ", '{}', '{}'"
		rows, err := tx.Query(ctx, opts+"EXECUTE "+name+"("+args+")")
		if err != nil {
			return err
		}
		if lines, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		return errRollback
	})
	if err != nil && !errors.Is(err, errRollback) {
		return "", fmt.Errorf("postgres: explain claim: %w", err)
	}
	return strings.Join(lines, "\n"), nil
}

// errRollback makes pgx.BeginFunc roll back.
var errRollback = errors.New("rollback")

// textArray spells strs as a text[] literal.
func textArray(strs []string) string {
	q := make([]string, len(strs))
	for i, v := range strs {
		q[i] = quoteLiteral(v)
	}
	return "ARRAY[" + strings.Join(q, ", ") + "]::text[]"
}
