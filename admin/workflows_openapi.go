package admin

// workflowSchemas are the OpenAPI schemas of the workflow routes.
func workflowSchemas() schema {
	attempt := schema{"number": integer(), "instance": str(), "started_at": timeT(), "ended_at": timeN(),
		"outcome": enum("running", "success", "failed", "cancelled", "lost"), "error": str()}
	task := schema{"id": str(), "state": enum("pending", "running", "up_for_retry", "success", "failed", "upstream_failed", "skipped"),
		"attempts": integer(), "upstream": schema{"type": []string{"array", "null"}, "items": str()},
		"reason": str(), "error": str(), "next_attempt_at": timeN(), "dead_letter_id": str(), "replayed_from": str(),
		"started_at": timeN(), "ended_at": timeN(), "history": arrayOf(ref("WorkflowAttempt"))}
	run := schema{"id": str(), "dag_id": str(), "state": enum(runStates...), "reason": str(), "owner": str(),
		"created_at": timeT(), "ended_at": timeN(), "tasks": arrayOf(ref("WorkflowTask"))}
	return schema{
		"WorkflowAttempt": closed(attempt),
		"WorkflowTask":    closed(task),
		"WorkflowRun":     closed(run, "tasks"),
		"WorkflowRunList": listOf("WorkflowRun"),
	}
}

// workflowPaths are the OpenAPI paths of the workflow routes.
func workflowPaths() schema {
	return schema{
		"/v1/workflows/runs": schema{"get": op("listWorkflowRuns", "List workflow runs, newest first",
			query("dag_id", "state", "cursor", "limit"), "", one("200", "WorkflowRunList"), "400", "404")},
		"/v1/workflows/runs/{id}": schema{"get": op("getWorkflowRun",
			"Show a workflow run as its task graph: each task's state, dependencies, attempts and the reason for its state in words",
			path("id"), "", one("200", "WorkflowRun"), "400", "404")},
		"/v1/workflows/run": schema{"get": op("getWorkflowRunByQuery",
			"Show a workflow run named in the query (for runs named . or ..)",
			query("id"), "", one("200", "WorkflowRun"), "400", "404")},
	}
}
