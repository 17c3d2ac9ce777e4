#!/usr/bin/env bash
# floors.sh: how close any outbox can come to the raw-SQL baselines of
# BENCHMARKS.md on this PostgreSQL, measured with pgbench beside the raw
# table in the same run. It answers one question for issue 10's raw-SQL
# targets (enqueue of 100 rows >= 0.6x raw, drain >= 0.6x raw): what do the
# rows and writes an outbox cannot do without cost by themselves, with
# everything else of Backstop taken away?
#
# Enqueue of 100 rows a statement, and of one row a statement (4 clients,
# rows made by the server so that no client cost enters), into:
#   raw    the baseline's table: (bigserial, payload, created_at)
#   lean   the outbox's columns with only its primary key: no other index,
#          no trigger, no check
#   keyed  lean plus the unique index on id that lookups by message id need
#   outbox Backstop's own table, as `backstop migrate` creates it
# The outbox variants are given their ids, time-ordered like the UUIDv7s
# Enqueue makes, from a sequence (one nextval, some text and a cast a row,
# which the raw rows do not pay): Backstop sends ids made by the client, and
# the schema's backstop_uuidv7(), the default for plain-SQL writers, costs
# about a quarter of a lean 100-row insert by itself.
# Drain of a 100k backlog, 1000 rows a transaction, 4 clients:
#   raw    the baseline's DELETE ... FOR UPDATE SKIP LOCKED, handled inside
#          the transaction that deletes (a crash mid-handling rolls back)
#   lease  the least a lease needs: one transaction deletes what the client
#          leased before and leases the next 1000 (UPDATE ... SKIP LOCKED),
#          on the lean table with two partial indexes (unleased rows; leased
#          rows by instance). No Go, no delivery: the database's part only.
#   held   a lease that is the claiming transaction's row lock: one
#          transaction locks the next 1000 ready rows of Backstop's own table
#          (SELECT ... FOR UPDATE SKIP LOCKED, its rows sent to the client),
#          then deletes them by seq in a second statement, as a claim that
#          holds its transaction open across the deliveries would record
#          them. A crash rolls it back; no lease column is written.
#
# Usage: bench/floors.sh [rounds]   (PGURL overrides the database, default
# postgres://postgres@127.0.0.1:5432/test). Needs psql, pgbench and go.
set -euo pipefail

rounds=${1:-3}
url=${PGURL:-postgres://postgres@127.0.0.1:5432/test}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
schema=floors_$$
trap 'psql -q "$url" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

scoped="$url"
case "$url" in *\?*) scoped="$url&options=-csearch_path%3D$schema" ;; *) scoped="$url?options=-csearch_path%3D$schema" ;; esac

psql -q "$url" -v ON_ERROR_STOP=1 -c "CREATE SCHEMA $schema" >/dev/null
(cd "$here/.." && go run ./cmd/backstop migrate --db "$scoped" >/dev/null)

payload="convert_to('{\"n\":' || g || ',\"s\":\"\",\"t\":1700000000000000000}', 'UTF8')"
psql -q "$scoped" -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE TABLE raw_queue (id bigserial PRIMARY KEY, payload bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE lean (LIKE backstop_outbox INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE lean ADD PRIMARY KEY (seq);
CREATE TABLE keyed (LIKE lean INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE keyed ADD PRIMARY KEY (seq), ADD UNIQUE (id);
CREATE SEQUENCE ids;
CREATE TABLE leased (LIKE lean INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE leased ADD PRIMARY KEY (seq);
CREATE INDEX leased_free ON leased (seq) WHERE instance_id IS NULL;
CREATE INDEX leased_held ON leased (instance_id) WHERE instance_id IS NOT NULL;
SQL

cat > "$work/raw.sql" <<SQL
INSERT INTO raw_queue (payload) SELECT $payload FROM generate_series(1, 100) g;
SQL
id="('01a20bc9-4264-7cc6-93c8-' || lpad(to_hex(nextval('ids')), 12, '0'))::uuid"
cat > "$work/raw-1.sql" <<SQL
INSERT INTO raw_queue (payload) SELECT $payload FROM (VALUES (1)) AS v(g);
SQL
for t in lean keyed backstop_outbox; do
	cat > "$work/$t.sql" <<SQL
INSERT INTO $t (id, destination, stream, type, payload, headers, created_at)
SELECT $id, 'bench', '', 'bench', $payload, '{}'::jsonb, now()
FROM generate_series(1, 100) g RETURNING id, seq, status, created_at;
SQL
	cat > "$work/$t-1.sql" <<SQL
INSERT INTO $t (id, destination, stream, type, payload, headers, created_at)
SELECT $id, 'bench', '', 'bench', $payload, '{}'::jsonb, now()
FROM (VALUES (1)) AS v(g) RETURNING id, seq, status, created_at;
SQL
done
cat > "$work/raw-drain.sql" <<'SQL'
BEGIN;
DELETE FROM raw_queue WHERE id IN (
	SELECT id FROM raw_queue ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED) RETURNING id, payload;
COMMIT;
SQL
cat > "$work/lease-drain.sql" <<'SQL'
BEGIN;
DELETE FROM leased WHERE instance_id = 'c' || :client_id;
UPDATE leased SET instance_id = 'c' || :client_id, lease_expiry = now() + interval '30 seconds'
WHERE seq IN (SELECT seq FROM leased WHERE instance_id IS NULL ORDER BY seq LIMIT 1000 FOR UPDATE SKIP LOCKED)
RETURNING *;
COMMIT;
SQL

cat > "$work/held-drain.sql" <<'SQL'
BEGIN;
SELECT coalesce(array_agg(seq), '{}')::text AS held, array_agg(payload) AS payloads FROM (
	SELECT seq, payload FROM backstop_outbox
	WHERE destination = 'bench' AND published_at IS NULL AND dead_lettered_at IS NULL
		AND instance_id IS NULL AND scheduled_for IS NULL AND (stream = '' OR ordering = 'none')
	ORDER BY seq LIMIT 1000 FOR UPDATE SKIP LOCKED) x \gset
DELETE FROM backstop_outbox WHERE seq = ANY(:held::bigint[]);
COMMIT;
SQL

# pgbench's transactions per second for script $1 (extra flags follow).
tps() {
	local script=$1
	shift
	pgbench "$scoped" -n -M prepared -c 4 -j 2 "$@" -f "$work/$script" 2>&1 |
		sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}

empty() { psql -q "$scoped" -c "TRUNCATE raw_queue, lean, keyed, leased, backstop_outbox" >/dev/null; }

fill() {
	empty
	psql -q "$scoped" -v ON_ERROR_STOP=1 >/dev/null <<SQL
INSERT INTO raw_queue (payload) SELECT $payload FROM generate_series(1, 100000) g;
INSERT INTO leased (id, destination, type, payload) SELECT gen_random_uuid(), 'bench', 'bench', $payload
FROM generate_series(1, 100000) g;
INSERT INTO backstop_outbox (id, destination, type, payload) SELECT $id, 'bench', 'bench', $payload
FROM generate_series(1, 100000) g;
SQL
	psql -q "$scoped" -c "VACUUM ANALYZE raw_queue" -c "VACUUM ANALYZE leased" -c "VACUUM ANALYZE backstop_outbox" \
		-c "CHECKPOINT" >/dev/null
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

declare -A ratios
for r in $(seq 1 "$rounds"); do
	declare -A rate=()
	for t in raw lean keyed backstop_outbox; do
		empty
		rate[$t]=$(tps "$t.sql" -T 10)
		empty
		rate[$t-1]=$(tps "$t-1.sql" -T 10)
	done
	fill
	# 100k rows, 1000 a transaction, over 4 clients: 25 transactions each
	# (the lease drain one more, to delete its last lease).
	drain_raw=$(tps raw-drain.sql -t 25)
	drain_lease=$(tps lease-drain.sql -t 26)
	drain_held=$(tps held-drain.sql -t 25)
	left=$(psql -Atq "$scoped" -c "SELECT count(*) FROM backstop_outbox")
	[ "$left" = 0 ] || { echo "held drain left $left rows" >&2; exit 1; }
	printf 'round %d: enqueue-100 rows/s raw %.0f lean %.0f keyed %.0f outbox %.0f; enqueue-1 rows/s raw %.0f lean %.0f keyed %.0f outbox %.0f; drain rows/s raw %.0f lease %.0f held %.0f\n' \
		"$r" "$(awk -v x="${rate[raw]}" 'BEGIN{print x*100}')" "$(awk -v x="${rate[lean]}" 'BEGIN{print x*100}')" \
		"$(awk -v x="${rate[keyed]}" 'BEGIN{print x*100}')" "$(awk -v x="${rate[backstop_outbox]}" 'BEGIN{print x*100}')" \
		"${rate[raw-1]}" "${rate[lean-1]}" "${rate[keyed-1]}" "${rate[backstop_outbox-1]}" \
		"$(awk -v x="$drain_raw" 'BEGIN{print x*1000}')" "$(awk -v x="$drain_lease" 'BEGIN{print x*1000}')" \
		"$(awk -v x="$drain_held" 'BEGIN{print x*1000}')"
	ratios[lean]+=" $(ratio "${rate[lean]}" "${rate[raw]}")"
	ratios[keyed]+=" $(ratio "${rate[keyed]}" "${rate[raw]}")"
	ratios[outbox]+=" $(ratio "${rate[backstop_outbox]}" "${rate[raw]}")"
	ratios[lean-1]+=" $(ratio "${rate[lean-1]}" "${rate[raw-1]}")"
	ratios[keyed-1]+=" $(ratio "${rate[keyed-1]}" "${rate[raw-1]}")"
	ratios[outbox-1]+=" $(ratio "${rate[backstop_outbox-1]}" "${rate[raw-1]}")"
	ratios[lease]+=" $(ratio "$drain_lease" "$drain_raw")"
	ratios[held]+=" $(ratio "$drain_held" "$drain_raw")"
done

median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] " [" v[1] "-" v[NR] "]" }'; }
echo
echo "ratios to raw, median [min-max] over $rounds rounds:"
echo "  enqueue 100 rows, lean table (outbox columns, primary key only): $(median "${ratios[lean]}")"
echo "  enqueue 100 rows, lean table + unique id:                        $(median "${ratios[keyed]}")"
echo "  enqueue 100 rows, Backstop's outbox table:                       $(median "${ratios[outbox]}")"
echo "  enqueue 1 row, lean table:                                       $(median "${ratios[lean-1]}")"
echo "  enqueue 1 row, lean table + unique id:                           $(median "${ratios[keyed-1]}")"
echo "  enqueue 1 row, Backstop's outbox table:                          $(median "${ratios[outbox-1]}")"
echo "  drain 100k, least lease protocol (database only):                $(median "${ratios[lease]}")"
echo "  drain 100k, lease held as the transaction's row lock:            $(median "${ratios[held]}")"
