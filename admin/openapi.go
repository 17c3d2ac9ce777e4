package admin

import (
	"encoding/json"
	"net/http"
	"sync"
)

// The OpenAPI 3.1 document is built here, next to the handlers, and the
// package's tests check every response they receive against it: a field
// added to a response type without its schema fails them (every object is
// closed with additionalProperties false).

type schema = map[string]any

func str() schema                { return schema{"type": "string"} }
func integer() schema            { return schema{"type": "integer"} }
func number() schema             { return schema{"type": "number"} }
func boolean() schema            { return schema{"type": "boolean"} }
func timeT() schema              { return schema{"type": "string", "format": "date-time"} }
func timeN() schema              { return schema{"type": []string{"string", "null"}, "format": "date-time"} }
func ref(name string) schema     { return schema{"$ref": "#/components/schemas/" + name} }
func arrayOf(s schema) schema    { return schema{"type": "array", "items": s} }
func strMap() schema             { return schema{"type": "object", "additionalProperties": str()} }
func anyJSON() schema            { return schema{} }
func enum(vals ...string) schema { return schema{"type": "string", "enum": vals} }

// object is a closed object; required lists the keys always present.
func object(props schema, required ...string) schema {
	s := schema{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// all returns every key of props, for objects whose keys are all present.
func all(props schema) []string {
	out := make([]string, 0, len(props))
	for k := range props {
		out = append(out, k)
	}
	return out
}

func closed(props schema, optional ...string) schema {
	req := []string{}
	for _, k := range all(props) {
		if !contains(optional, k) {
			req = append(req, k)
		}
	}
	return object(props, req...)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func listOf(item string) schema {
	return closed(schema{"items": arrayOf(ref(item)), "next_cursor": str()})
}

func components() schema {
	message := schema{
		"id": str(), "seq": integer(), "destination": str(), "stream": str(), "type": str(),
		"payload": anyJSON(), "payload_base64": str(), "payload_omitted": boolean(), "headers": strMap(), "ordering": str(), "status": str(),
		"attempts": integer(), "failure_reason": str(), "error": str(), "fingerprint": str(),
		"scheduled_for": timeN(), "instance_id": str(), "lease_expiry": timeN(), "created_at": timeT(),
		"dead_lettered_at": timeN(), "history": arrayOf(ref("AuditRecord")),
	}
	audit := schema{"id": integer(), "at": timeT(), "actor": str(), "action": str(), "target": str(),
		"filter": str(), "count": integer(), "notes": str()}
	entry := schema{
		"id": str(), "message_id": str(), "destination": str(), "stream": str(), "type": str(), "seq": integer(),
		"payload": anyJSON(), "payload_base64": str(), "payload_omitted": boolean(), "headers": strMap(), "task_id": str(), "dag_id": str(),
		"dag_run_id": str(), "reason": str(), "error": str(), "fingerprint": str(), "attempts": integer(),
		"failure_time": timeT(), "first_failure_time": timeN(), "last_attempt_time": timeN(),
		"metadata": schema{"type": "object"}, "status": enum("pending", "replayed", "resolved"),
		"resolution_notes": str(), "resolved_by": str(), "resolved_at": timeN(), "replayed_by": str(),
		"replay_notes": str(), "replayed_at": timeN(), "history": arrayOf(ref("AuditRecord")),
	}
	filter := schema{"destination": str(), "stream": str(), "message_id": str(), "reason": str(), "fingerprint": str(),
		"status": enum("pending", "replayed", "resolved"), "after": timeT(), "before": timeT()}
	bulkReq := schema{"dry_run": boolean(), "notes": str(), "all": boolean()}
	for k, v := range filter {
		bulkReq[k] = v
	}
	return schema{
		"Problem": object(schema{"type": str(), "title": str(), "status": integer(), "detail": str(), "field": str()},
			"type", "title", "status"),
		"Message":     closed(message, "payload", "payload_base64", "payload_omitted", "history"),
		"MessageList": listOf("Message"),
		"EnqueueRequest": object(schema{
			"destination": str(), "topic": str(), "type": str(), "payload": anyJSON(), "payload_base64": str(),
			"stream": str(), "headers": strMap(), "ordering": enum("strict", "release", "none"),
			"idempotency_key": str(), "scheduled_for": timeT(),
		}, "type"),
		"EnqueueResponse": closed(schema{"id": str(), "ids": arrayOf(str()), "duplicate": boolean()}),
		"ActionRequest":   object(schema{"notes": str(), "reason": str()}),
		"ActionResult":    closed(schema{"action": str(), "target": str(), "count": integer(), "audit_id": integer()}),
		"Stream": closed(schema{"destination": str(), "stream": str(), "pending": integer(), "blocked": boolean(),
			"why": str(), "head": schema{"oneOf": []schema{ref("Message"), {"type": "null"}}}}),
		"Entry":          closed(entry, "payload", "payload_base64", "payload_omitted", "task_id", "dag_id", "dag_run_id", "history"),
		"EntryList":      listOf("Entry"),
		"BulkRequest":    object(bulkReq),
		"BulkResult":     closed(schema{"action": str(), "dry_run": boolean(), "count": integer(), "sample": arrayOf(ref("Entry")), "audit_id": integer(), "as_of": timeT()}, "audit_id", "as_of"),
		"RecoverRequest": object(schema{"destination": str(), "since": timeT(), "dry_run": boolean(), "notes": str()}, "destination", "since"),
		"PurgeRequest":   object(schema{"older_than": str(), "dry_run": boolean(), "notes": str()}, "older_than"),
		"Stats": closed(schema{
			"retry_distribution": arrayOf(closed(schema{"attempts": integer(), "count": integer()})),
			"failure_reasons":    arrayOf(closed(schema{"reason": str(), "count": integer()})),
			"scheduled_backlog":  closed(schema{"count": integer(), "next": timeN(), "latest": timeN()}),
			"poison_candidates":  arrayOf(ref("Message")),
			"dlq_depth":          integer(), "dlq_oldest_age_seconds": number(), "blocked_streams": integer(),
		}),
		"Breaker": closed(schema{"destination": str(), "state": str(), "openings": integer(), "delivered": integer(),
			"released": integer(), "failed": integer(), "dead_lettered": integer(), "in_flight": integer(),
			"paused_until": timeT()}, "dead_lettered", "in_flight", "paused_until"),
		"BreakerList": listOf("Breaker"),
		"AuditRecord": closed(audit),
		"AuditList":   listOf("AuditRecord"),
		"Document":    schema{"type": "object", "required": []string{"openapi", "paths"}},
	}
}

// op describes one operation.
func op(id, summary string, params []schema, body string, ok map[string]string, errs ...string) schema {
	resp := schema{}
	for status, name := range ok {
		resp[status] = schema{"description": summary, "content": schema{"application/json": schema{"schema": ref(name)}}}
	}
	for _, status := range append([]string{"401", "500", "503"}, errs...) {
		resp[status] = schema{"description": "problem", "content": schema{"application/problem+json": schema{"schema": ref("Problem")}}}
	}
	o := schema{"operationId": id, "summary": summary, "responses": resp, "security": []schema{{"bearer": []string{}}}}
	if len(params) > 0 {
		o["parameters"] = params
	}
	if body != "" {
		o["requestBody"] = schema{"content": schema{"application/json": schema{"schema": ref(body)}}}
	}
	return o
}

func query(names ...string) []schema {
	out := make([]schema, len(names))
	for i, n := range names {
		out[i] = schema{"name": n, "in": "query", "schema": str()}
	}
	return out
}

func path(names ...string) []schema {
	out := make([]schema, len(names))
	for i, n := range names {
		out[i] = schema{"name": n, "in": "path", "required": true, "schema": str()}
	}
	return out
}

func one(status, name string) map[string]string { return map[string]string{status: name} }

// Document returns the OpenAPI 3.1 document of the API.
func Document() map[string]any {
	action := func(id, summary string) schema {
		return schema{"post": op(id, summary, path("id"), "ActionRequest", one("200", "ActionResult"), "400", "403", "404", "409", "413")}
	}
	bulk := func(id, summary string) schema {
		return schema{"post": op(id, summary, nil, "BulkRequest", one("200", "BulkResult"), "400", "403", "413")}
	}
	schemas, paths := components(), schema{}
	for k, v := range workflowSchemas() {
		schemas[k] = v
	}
	for k, v := range workflowPaths() {
		paths[k] = v
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": schema{"title": "Backstop admin API", "version": "1",
			"description": "Operate Backstop: messages, streams, dead letters, stats, breakers, audit. Errors are RFC 9457 problem details. A bulk action or a purge still running tells a client that sends the header Backstop-Progress: 102 so every 5 s by default, with an informational 102 Processing answer before the final one."},
		"components": schema{
			"schemas":         schemas,
			"securitySchemes": schema{"bearer": schema{"type": "http", "scheme": "bearer"}},
		},
		"paths": schema{
			"/v1/messages": schema{
				"post": op("enqueue", "Enqueue a message (202), or find the one written under its idempotency key (200)", nil,
					"EnqueueRequest", map[string]string{"202": "EnqueueResponse", "200": "EnqueueResponse"}, "400", "403", "413", "422"),
				"get": op("listMessages", "List messages in stream order", query("destination", "stream", "type", "state", "cursor", "limit", "payload"),
					"", one("200", "MessageList"), "400", "403"),
			},
			"/v1/messages/{id}":             schema{"get": op("getMessage", "Show a message", path("id"), "", one("200", "Message"), "400", "404")},
			"/v1/messages/{id}/retry-now":   action("retryNow", "Make a waiting message due now"),
			"/v1/messages/{id}/reset":       action("resetAttempts", "Set a message's attempts to zero"),
			"/v1/messages/{id}/cancel":      action("cancelMessage", "Delete an undelivered message"),
			"/v1/messages/{id}/dead-letter": action("deadLetterMessage", "Move a message to the dead-letter queue"),
			"/v1/streams/{destination}/{stream}": schema{"get": op("getStream", "Show a stream and why it is blocked",
				append(path("destination", "stream"), query("payload")...), "", one("200", "Stream"), "400", "404")},
			"/v1/streams/{destination}/{stream}/release": schema{"post": op("releaseStream", "Let a strict stream go past its failed messages",
				path("destination", "stream"), "ActionRequest", one("200", "ActionResult"), "400", "403", "413")},
			"/v1/stream": schema{"get": op("getStreamByQuery", "Show a stream named in the query (for streams named . or ..)",
				query("destination", "stream", "payload"), "", one("200", "Stream"), "400", "404")},
			"/v1/stream/release": schema{"post": op("releaseStreamByQuery", "Release a stream named in the query (for streams named . or ..)",
				query("destination", "stream"), "ActionRequest", one("200", "ActionResult"), "400", "403", "413")},
			"/v1/dlq": schema{"get": op("listDeadLetters", "List dead letters",
				query("destination", "stream", "message_id", "reason", "fingerprint", "status", "after", "before", "cursor", "limit", "payload"), "",
				one("200", "EntryList"), "400", "403")},
			"/v1/dlq/{id}": schema{
				"get":    op("getDeadLetter", "Show a dead letter with its history", path("id"), "", one("200", "Entry"), "404"),
				"delete": op("deleteDeadLetter", "Delete a dead letter", path("id"), "ActionRequest", one("200", "ActionResult"), "400", "403", "404"),
			},
			"/v1/dlq/{id}/replay": schema{"post": op("replayDeadLetter", "Replay a dead letter (422: its destination is not configured on this server)",
				path("id"), "ActionRequest", one("200", "ActionResult"), "400", "403", "404", "409", "413", "422")},
			"/v1/dlq/{id}/resolve": action("resolveDeadLetter", "Resolve a dead letter with notes"),
			"/v1/dlq/replay": schema{"post": op("replayDeadLetters", "Replay the dead letters matching a filter (422: the filter's destination is not configured on this server)",
				nil, "BulkRequest", one("200", "BulkResult"), "400", "403", "413", "422")},
			"/v1/dlq/resolve": bulk("resolveDeadLetters", "Resolve the dead letters matching a filter"),
			"/v1/dlq/delete":  bulk("deleteDeadLetters", "Delete the dead letters matching a filter"),
			"/v1/dlq/recover": schema{"post": op("recoverDeadLetters", "Replay everything dead-lettered for a destination since a time",
				nil, "RecoverRequest", one("200", "BulkResult"), "400", "403", "413", "422")},
			"/v1/dlq/purge": schema{"post": op("purgeDeadLetters", "Remove dead letters older than a duration",
				nil, "PurgeRequest", one("200", "BulkResult"), "400", "403", "413")},
			"/v1/openapi.json": schema{"get": op("openapi", "This document", nil, "", one("200", "Document"))},
			"/v1/stats":        schema{"get": op("stats", "Monitoring summary, computed at most once every 5 s for every caller", nil, "", one("200", "Stats"))},
			"/v1/breakers":     schema{"get": op("breakers", "Destinations' circuit breakers", nil, "", one("200", "BreakerList"))},
			"/v1/audit":        schema{"get": op("audit", "Operators' actions, newest first", query("target", "action", "cursor", "limit"), "", one("200", "AuditList"), "400")},
		},
	}
	for k, v := range doc["paths"].(schema) {
		paths[k] = v
	}
	doc["paths"] = paths
	return doc
}

var (
	docOnce sync.Once
	docJSON []byte
)

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	docOnce.Do(func() { docJSON, _ = json.MarshalIndent(Document(), "", "  ") })
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(docJSON)
}
