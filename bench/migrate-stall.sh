#!/usr/bin/env bash
# migrate-stall.sh: how long an upgrade holds up an application's inserts
# into the outbox. A schema is made at version 31 with ROWS undelivered
# messages (migration 32 adds an index to the outbox); one client inserts
# a row at a time for 12 s, and after 3 s the given backstop binary runs
# `backstop migrate` (migrations 32 on; a binary that knows fewer applies
# fewer). Prints the migration's time and the writer's insert
# latencies (the largest is how long the build held it).
#
# Usage: bench/migrate-stall.sh BINARY [ROWS]   (PGURL overrides the
# database, default postgres://postgres@127.0.0.1:5432/test; needs psql
# and pgbench). Build the binary with: go build -o /tmp/bs ./cmd/backstop
set -euo pipefail

bin=$1
rows=${2:-5000000}
url=${PGURL:-postgres://postgres@127.0.0.1:5432/test}
work=$(mktemp -d)
schema=stall_$$
trap 'psql -q "$url" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
scoped="$url"
case "$url" in *\?*) scoped="$url&options=-csearch_path%3D$schema" ;; *) scoped="$url?options=-csearch_path%3D$schema" ;; esac

psql -q "$url" -v ON_ERROR_STOP=1 -c "CREATE SCHEMA $schema" >/dev/null
"$bin" migrate --db "$scoped" >/dev/null 2>&1
# back to version 31: what 32 to 35 add is taken away again
psql -q "$scoped" -v ON_ERROR_STOP=1 >/dev/null <<SQL
INSERT INTO backstop_outbox (id, destination, type, payload)
SELECT gen_random_uuid(), 'bench', 'bench', convert_to('{"n":' || g || ',"s":"padding padding padding padding"}', 'UTF8')
FROM generate_series(1, $rows) g;
DROP INDEX IF EXISTS backstop_outbox_dead_hold_idx, backstop_outbox_retrying_idx, backstop_outbox_dead_seq_idx;
ALTER TABLE backstop_inbox_received DROP COLUMN IF EXISTS row_id, DROP COLUMN IF EXISTS digest;
DELETE FROM backstop_migrations WHERE version >= 32;
VACUUM ANALYZE backstop_outbox;
CHECKPOINT;
SQL
echo "outbox: $rows rows, $(psql -Atq "$scoped" -c "SELECT pg_size_pretty(pg_relation_size('backstop_outbox'))")"

echo "INSERT INTO backstop_outbox (id, destination, type, payload) VALUES (gen_random_uuid(), 'app', 't', '\x7b7d');" > "$work/insert.sql"
cd "$work"
pgbench "$scoped" -n -c 1 -T 12 -f insert.sql -l >/dev/null 2>&1 &
writer=$!
sleep 3
t0=$(date +%s%N)
"$bin" migrate --db "$scoped" >migrate.log 2>&1
t1=$(date +%s%N)
wait $writer
echo "migrate: $(( (t1 - t0) / 1000000 )) ms to version $(psql -Atq "$scoped" -c 'SELECT max(version) FROM backstop_migrations')"
awk '{ print $3 }' pgbench_log.* | sort -n | awk '{ v[NR] = $1 } END {
	printf "writer: %d inserts, p50 %.2f ms, p99 %.2f ms, max %.1f ms\n", NR, v[int(NR * 0.5)] / 1000, v[int(NR * 0.99)] / 1000, v[NR] / 1000 }'
