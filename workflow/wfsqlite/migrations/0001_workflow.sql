-- Workflow runs, version 1. {{prefix}} is the store's table prefix
-- (backstop_ by default). Times are unix milliseconds. The version of this
-- schema is kept in {{prefix}}wf_migrations, apart from the store's own.

-- One row per DAG run. An unowned run has owner NULL and lease_expiry 0,
-- so "nobody holds it or its lease lapsed" is one range on lease_expiry.
CREATE TABLE {{prefix}}wf_runs (
    id           TEXT    PRIMARY KEY,
    dag_id       TEXT    NOT NULL,
    dag_hash     TEXT    NOT NULL,
    state        TEXT    NOT NULL
                 CHECK (state IN ('running', 'success', 'failed', 'partial_success')),
    reason       TEXT    NOT NULL DEFAULT '',
    input        BLOB,
    owner        TEXT,
    lease_expiry INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    ended_at     INTEGER
);

-- Abandoned runs (selectAbandoned): only running runs are in it, ordered
-- by when their lease lapsed; ended runs, however many, are never scanned.
CREATE INDEX {{prefix}}wf_runs_abandoned ON {{prefix}}wf_runs (lease_expiry, id)
    WHERE state = 'running';

-- One row per task of a run: its current state. Loading a run, starting,
-- finishing and marking tasks go by the primary key (run_id, task_id);
-- reopening a run's dependents of a task scans only that run's rows.
CREATE TABLE {{prefix}}wf_tasks (
    run_id          TEXT    NOT NULL REFERENCES {{prefix}}wf_runs (id) ON DELETE CASCADE,
    task_id         TEXT    NOT NULL,
    state           TEXT    NOT NULL
                    CHECK (state IN ('pending', 'running', 'up_for_retry', 'success', 'failed',
                                     'upstream_failed', 'skipped')),
    attempt         INTEGER NOT NULL DEFAULT 0,
    failures        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    owner           TEXT,
    started_at      INTEGER,
    ended_at        INTEGER,
    error           TEXT    NOT NULL DEFAULT '',
    reason          TEXT    NOT NULL DEFAULT '',
    cause           TEXT    NOT NULL DEFAULT '',
    result          BLOB,
    dead_letter     TEXT    NOT NULL DEFAULT '',
    replay_of       TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, task_id)
) WITHOUT ROWID;

-- Every attempt at every task, kept after replays: a run's history.
-- Loading a run reads its rows by the primary key's prefix.
CREATE TABLE {{prefix}}wf_attempts (
    run_id     TEXT    NOT NULL,
    task_id    TEXT    NOT NULL,
    attempt    INTEGER NOT NULL,
    owner      TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at   INTEGER,
    outcome    TEXT    NOT NULL
               CHECK (outcome IN ('running', 'success', 'failed', 'cancelled', 'lost')),
    error      TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, task_id, attempt),
    FOREIGN KEY (run_id, task_id) REFERENCES {{prefix}}wf_tasks (run_id, task_id) ON DELETE CASCADE
) WITHOUT ROWID;
