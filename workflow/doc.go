// Package workflow runs DAGs of tasks durably, in the same database as the
// outbox, and explains every decision it takes.
//
// A DAG (NewDAG) is a set of tasks with dependencies. Each task has a
// function, a number of retries with a back-off strategy, an optional
// timeout, and may be critical. Definitions are checked when they are
// built: duplicate IDs, unknown dependencies and cycles are errors that
// name the culprits.
//
// An Engine runs a DAG: independent tasks run concurrently (up to
// Config.MaxConcurrentTasks), each once all its dependencies have ended.
// What a task's failure does to the rest of the run is its DAG's
// propagation policy (errorhandling.PropagationConfig):
//
//   - fail: the first task failure stops the run: attempts running are
//     cancelled (their tasks end skipped), pending tasks are skipped, and
//     the run fails.
//   - skip_downstream (the default): the tasks downstream of the failed
//     task end upstream_failed; independent branches go on; the run fails.
//   - allow_partial: as skip_downstream, and with AllowPartialSuccess the
//     run ends partial_success when every critical task succeeded.
//     AllowPartialSuccess has the same effect under skip_downstream.
//
// A task can tolerate the failure of one dependency (Task.AllowFailure):
// it then runs once that dependency has ended, whatever its outcome.
//
// Every task that did not run or did not succeed has a reason in words
// ("skipped: upstream task validate failed under skip_downstream"), and
// Run.Explain puts the run's story in a few lines.
//
// # Durability
//
// Runs, task states, results and every attempt are stored through a
// wfstore.Store: wfsqlite (in a store/sqlite database) or wfpostgres (in a
// store/postgres database). The engine stores each decision before acting
// on it, so a process killed mid-run is resumed by Resume, or by Work on
// another instance once its lease lapses, without running again a task
// that succeeded. A task's result (TaskContext.SetResult) and the outbox
// messages it writes (TaskContext.Enqueue) are committed in the transaction
// that records its success: they exist once, or not at all. An attempt
// whose success could not be recorded because the database was out of
// reach (a killed connection, a failover) is treated as one cut off by a
// crash: it runs again and does not count as a failure.
//
// # Failures and repair
//
// A failed attempt is retried after its strategy's delay, durably (the
// task is up_for_retry until then), unless its error is permanent. A task
// out of retries fails for good: the DAG's OnTaskFailure is called and the
// task is dead-lettered (dlq.Manager.AddFailedTask). If the process dies
// between the failure and the dead letter, the resumed run finishes the
// job: the entry is not added twice, but OnTaskFailure may be called again.
// An entry's ID is derived from the failed attempt, so that an instance
// that stalls past its lease while it adds the entry cannot add a second
// one beside the entry of the instance that took the run over.
// Replaying its
// dead letter with Engine.ReplayTask runs it again and then re-evaluates the
// tasks that were upstream_failed because of it, so a repaired run can still
// end successfully; its history keeps every attempt.
package workflow
