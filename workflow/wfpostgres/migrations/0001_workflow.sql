-- Workflow runs, version 1. {{T}} is the qualified table prefix (such as
-- backstop_ or "app".backstop_), {{P}} the bare prefix for index names. The
-- version of this schema is kept in {{T}}wf_migrations, apart from the
-- store's own.

-- One row per DAG run. An unowned run has owner NULL and lease_expiry
-- -infinity, so "nobody holds it or its lease lapsed" is one range on
-- lease_expiry.
CREATE TABLE {{T}}wf_runs (
	id           text        PRIMARY KEY,
	dag_id       text        NOT NULL,
	dag_hash     text        NOT NULL,
	state        text        NOT NULL
	             CHECK (state IN ('running', 'success', 'failed', 'partial_success')),
	reason       text        NOT NULL DEFAULT '',
	input        bytea,
	owner        text,
	lease_expiry timestamptz NOT NULL DEFAULT '-infinity',
	created_at   timestamptz NOT NULL,
	ended_at     timestamptz
);

-- Abandoned runs (selectAbandoned): only running runs are in it, ordered by
-- when their lease lapsed; ended runs, however many, are never scanned.
CREATE INDEX {{P}}wf_runs_abandoned_idx ON {{T}}wf_runs (lease_expiry, id)
	WHERE state = 'running';

-- One row per task of a run: its current state. Loading a run, starting,
-- finishing and marking tasks go by the primary key (run_id, task_id);
-- reopening a run's dependents of a task scans only that run's rows.
CREATE TABLE {{T}}wf_tasks (
	run_id          text        NOT NULL REFERENCES {{T}}wf_runs (id) ON DELETE CASCADE,
	task_id         text        NOT NULL,
	state           text        NOT NULL
	                CHECK (state IN ('pending', 'running', 'up_for_retry', 'success', 'failed',
	                                 'upstream_failed', 'skipped')),
	attempt         integer     NOT NULL DEFAULT 0,
	failures        integer     NOT NULL DEFAULT 0,
	next_attempt_at timestamptz,
	owner           text,
	started_at      timestamptz,
	ended_at        timestamptz,
	error           text        NOT NULL DEFAULT '',
	reason          text        NOT NULL DEFAULT '',
	cause           text        NOT NULL DEFAULT '',
	result          bytea,
	dead_letter     text        NOT NULL DEFAULT '',
	replay_of       text        NOT NULL DEFAULT '',
	PRIMARY KEY (run_id, task_id)
);

-- Every attempt at every task, kept after replays: a run's history.
-- Loading a run reads its rows by the primary key's prefix.
CREATE TABLE {{T}}wf_attempts (
	run_id     text        NOT NULL,
	task_id    text        NOT NULL,
	attempt    integer     NOT NULL,
	owner      text        NOT NULL,
	started_at timestamptz NOT NULL,
	ended_at   timestamptz,
	outcome    text        NOT NULL
	           CHECK (outcome IN ('running', 'success', 'failed', 'cancelled', 'lost')),
	error      text        NOT NULL DEFAULT '',
	PRIMARY KEY (run_id, task_id, attempt),
	FOREIGN KEY (run_id, task_id) REFERENCES {{T}}wf_tasks (run_id, task_id) ON DELETE CASCADE
);
