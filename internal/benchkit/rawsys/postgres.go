package rawsys

import (
	"context"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The baseline's PostgreSQL table and statements. The primary key serves
// the claim's ORDER BY id.
const (
	pgCreate = `CREATE TABLE raw_queue (
		id         bigserial PRIMARY KEY,
		payload    bytea NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now())`
	pgInsertOne  = `INSERT INTO raw_queue (payload) VALUES ($1)`
	pgInsertMany = `INSERT INTO raw_queue (payload) SELECT unnest($1::bytea[])`
	pgClaim      = `DELETE FROM raw_queue WHERE id IN (
		SELECT id FROM raw_queue ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING id, payload`
)

type pgDB struct{ pool *pgxpool.Pool }

// openPostgres connects with a default pool whose connections use schema,
// and creates the table there.
func openPostgres(ctx context.Context, url, schema string) (*pgDB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, pgCreate); err != nil {
		pool.Close()
		return nil, err
	}
	return &pgDB{pool: pool}, nil
}

func (d *pgDB) insert(ctx context.Context, payloads [][]byte) error {
	var err error
	if len(payloads) == 1 {
		_, err = d.pool.Exec(ctx, pgInsertOne, payloads[0])
	} else {
		_, err = d.pool.Exec(ctx, pgInsertMany, payloads)
	}
	return err
}

func (d *pgDB) claim(ctx context.Context, limit int, handle func([]byte) error) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, pgClaim, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		n, err = handleClaimed(rows, handle)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

func (d *pgDB) close() { d.pool.Close() }
