# Backstop's build. `make test` is what CI runs (through .ci/run).
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
PKGS        ?= ./...
# Extra flags for go test, e.g. TESTFLAGS='-run TestRetry -v'.
TESTFLAGS   ?=
BENCHFLAGS  ?= -benchmem -run '^$$'

.PHONY: test vet lint gotest fuzz fuzz-ci bench bench-targets soak bench-floors bench-smoke bench-breaker bench-postgres bench-sqlite bench-relay fmt chaos

## test: vet, lint, run every test with the race detector, then every fuzz
## target briefly.
test: vet lint gotest fuzz-ci

vet:
	$(GO) vet $(PKGS)

lint:
	$(GO) run $(STATICCHECK) $(PKGS)

# -timeout 20m: the SQLite store's package takes about 3 minutes under
# -race here, and hit go test's default 10 minutes once beside other
# test runs on the same two cores.
# The broker-wide alarm tests (a RabbitMQ memory alarm stalls every
# publisher of the broker) run alone, after every other package.
gotest:
	$(GO) test -race -count=1 -timeout 20m $(TESTFLAGS) $(PKGS)
	BACKSTOP_BROKER_ALARMS=1 $(GO) test -race -count=1 -run 'Alarm' ./transport/rabbitmq/

## fuzz: every fuzz target of the module (found in its _test.go files), each
## for FUZZTIME; new failing inputs land in the package's testdata/fuzz.
## fuzz-ci: the same, FUZZ_CI_TIME each, as `make test` runs it. A target
## that fails without writing a failing input (Go's fuzzer at times reports
## its own -fuzztime deadline as "context deadline exceeded") runs once more;
## a real failure writes its input to testdata/fuzz and fails at once.
FUZZTIME     ?= 1m
FUZZ_CI_TIME ?= 10s
fuzz:
	@$(MAKE) --no-print-directory fuzz-each FUZZ_EACH=$(FUZZTIME)
fuzz-ci:
	@$(MAKE) --no-print-directory fuzz-each FUZZ_EACH=$(FUZZ_CI_TIME)
fuzz-each:
	@set -e; for file in $$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./bench/' | sort); do \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
			echo "fuzz $$(dirname $$file) $$target ($(FUZZ_EACH))"; \
			log="$${TMPDIR:-/tmp}/backstop-fuzz-$$$$.log"; \
			if ! $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZ_EACH) ./$$(dirname $$file) > "$$log" 2>&1; then \
				if grep -q 'Failing input written' "$$log"; then cat "$$log"; exit 1; fi; \
				echo "fuzz: $$target ended without a failing input (go's fuzzer sometimes reports its own deadline as a failure); running it again"; \
				$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZ_EACH) ./$$(dirname $$file) > "$$log" 2>&1 || { cat "$$log"; exit 1; }; \
			fi; \
		done; \
	done

## bench: Backstop against River and raw SQL on PostgreSQL and SQLite, each
## case in its own process, 3 shuffled rounds; regenerates BENCHMARKS.md (takes
## a couple of hours). bench/ is a module of its own, so Backstop never
## depends on River. Extra flags: BENCH_ARGS='--stores postgres --cases drain/'.
BENCH_ARGS ?=
bench:
	cd bench && BENCH_VIA='make bench' $(GO) run ./cmd/bench --rounds 3 --scale default --out ../BENCHMARKS.md $(BENCH_ARGS)

## soak: insert-and-work for two minutes, past the lease duration (dead
## rows pile up between vacuums), Backstop's defaults beside River's
## benchmark settings, 2 rounds (about 12 minutes here); writes SOAK.md.
soak:
	cd bench && go run ./cmd/bench --rounds 2 --work-for 120s --cases 'postgres/work/backstop$$,postgres/work/river-bench$$' --out ../SOAK.md

## bench-targets: only the cases issue 10's targets compare (Backstop with
## its defaults, River with its benchmark settings or defaults, raw SQL), 3
## shuffled rounds (about 15 minutes here); regenerates BENCHMARKS.md.
TARGET_CASES = postgres/drain/backstop$$,postgres/drain/river-bench$$,postgres/drain/raw$$,postgres/work/backstop$$,postgres/work/river-bench$$,postgres/work-ordered/backstop$$,postgres/work-ordered/river-bench$$,postgres/latency/backstop$$,postgres/latency/river-bench$$,postgres/enqueue-1/,postgres/enqueue-100/,sqlite/drain/backstop$$,sqlite/drain/river-bench$$
bench-targets:
	cd bench && BENCH_VIA='make bench-targets' $(GO) run ./cmd/bench --rounds 3 --scale default --cases '$(TARGET_CASES)' --out ../BENCHMARKS.md $(BENCH_ARGS)

## bench-floors: how close any outbox can come to the raw-SQL baselines
## (pgbench on lean variants of the table beside the raw one, 3 rounds; about
## 4.5 minutes; docs/benchmarks.md). Needs psql and pgbench.
bench-floors:
	bash bench/floors.sh 3

## bench-smoke: every case of `make bench` once at a tiny scale; fails if a case
## fails or a check finds a lost, phantom or out-of-order message.
bench-smoke:
	cd bench && $(GO) run ./cmd/bench --rounds 1 --scale small --quiet-wait 0 --check $(BENCH_ARGS) >/dev/null

## bench-breaker: Backstop's breaker against sony/gobreaker in one run.
bench-breaker:
	$(GO) test $(BENCHFLAGS) -bench . -count 5 ./circuitbreaker/

## chaos: the chaos suite at full size (real relay processes on PostgreSQL
## and SQLite under load, faults injected in turn; see internal/chaos), then
## its report table. `make test` runs it at a small size.
CHAOS_REPORT ?= /tmp/backstop-chaos-report.md
chaos:
	@rm -f $(CHAOS_REPORT)
	BACKSTOP_CHAOS=full BACKSTOP_CHAOS_REPORT=$(CHAOS_REPORT) $(GO) test -count=1 -timeout 40m -run '^TestChaos' ./internal/chaos/; \
		status=$$?; cat $(CHAOS_REPORT) 2>/dev/null; exit $$status

fmt:
	gofmt -w $$(git ls-files '*.go')

## bench-postgres: the claim on the backlogs that hurt (docs/claim.md): 10k,
## 200k and 1M pending in 100 and in 10k streams, every head leased, half the
## backlog behind a dead-lettered head; p99 ratios to 10k; then enqueue with 8
## writers on one stream, on eight, unordered. BACKSTOP_BENCH_SIZES=10k,200k
## and BACKSTOP_BENCH_SHAPES limit. The older BenchmarkClaim (1 and 4
## instances, waiting retries) runs with BENCH_PG='BenchmarkClaim$$'.
BENCH_PG ?= BenchmarkClaimShapes
bench-postgres:
	BACKSTOP_BENCH_POSTGRES=1 $(GO) test -run '^$$' -bench '$(BENCH_PG)' -benchtime 300x -timeout 60m ./store/postgres/
	BACKSTOP_BENCH_POSTGRES=1 $(GO) test -run '^$$' -bench BenchmarkEnqueueWriters -benchtime 2000x -timeout 20m ./store/postgres/

## bench-sqlite: the SQLite twin of bench-postgres (same shapes and tables).
bench-sqlite:
	BACKSTOP_BENCH_SQLITE=1 $(GO) test -run '^$$' -bench BenchmarkClaimShapes -benchtime 300x -timeout 60m ./store/sqlite/
	BACKSTOP_BENCH_SQLITE=1 $(GO) test -run '^$$' -bench BenchmarkEnqueueWriters -benchtime 4000x -timeout 10m ./store/sqlite/

## bench-relay: relay throughput with a no-op handler on SQLite and PostgreSQL,
## and end-to-end latency (enqueue to delivery) with wake-ups, p50/p99.
bench-relay:
	BACKSTOP_BENCH_POSTGRES=1 $(GO) test -run '^$$' -bench 'RelayThroughput' -benchtime 5x ./relay/
	BACKSTOP_BENCH_POSTGRES=1 $(GO) test -run '^$$' -bench 'Latency' -benchtime 500x ./relay/
