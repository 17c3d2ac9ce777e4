-- Workflow runs, version 2: a run keeps its DAG's edges, each task's
-- upstream task IDs as JSON ({"load": ["extract"]}), so that a reader
-- without the DAG's definition (backstop serve's admin API and dashboard)
-- can draw the run as a graph. NULL for runs created before version 2.
ALTER TABLE {{prefix}}wf_runs ADD COLUMN upstream TEXT;
