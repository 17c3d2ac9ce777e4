package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
)

// cli runs the binary's root command with args and returns its output.
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRoot()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cli(t, args...)
	if err != nil {
		t.Fatalf("backstop %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func TestCLIOnStore(t *testing.T) {
	t.Setenv("USER", "alice")
	db := "--db=sqlite:" + filepath.Join(t.TempDir(), "b.db")
	out := mustCLI(t, db, "enqueue", "--destination", "billing", "--type", "invoice.due", "--stream", "cust-1",
		"--payload", `{"amount": 12}`, "--idempotency-key", "inv-1", "--header", "X-Trace=abc")
	id := strings.Fields(out)[1]
	if !strings.HasPrefix(out, "enqueued ") || len(id) != 36 {
		t.Fatalf("enqueue printed %q", out)
	}
	if out := mustCLI(t, db, "enqueue", "--destination", "billing", "--type", "invoice.due", "--idempotency-key", "inv-1"); !strings.Contains(out, "duplicate of") || !strings.Contains(out, id) {
		t.Errorf("repeat enqueue printed %q", out)
	}
	mustCLI(t, db, "enqueue", "--destination", "billing", "--type", "invoice.due", "--stream", "cust-1", "--payload", "not json \x01")
	out = mustCLI(t, db, "messages", "list", "--stream", "cust-1")
	if !strings.Contains(out, "DESTINATION") || !strings.Contains(out, id) || strings.Count(out, "\n") != 3 {
		t.Errorf("messages list:\n%s", out)
	}
	var list admin.List[admin.Message]
	if err := json.Unmarshal([]byte(mustCLI(t, db, "-o", "json", "messages", "list")), &list); err != nil || len(list.Items) != 2 {
		t.Fatalf("json list: %v %+v", err, list)
	}
	if list.Items[1].PayloadBase64 == "" {
		t.Errorf("a text payload should travel in base64: %+v", list.Items[1])
	}
	if out := mustCLI(t, db, "messages", "show", id); !strings.Contains(out, `{"amount":12}`) {
		t.Errorf("show:\n%s", out)
	}
	mustCLI(t, db, "messages", "dead-letter", id, "--reason", "customer closed", "--notes", "ticket 7")
	out = mustCLI(t, db, "streams", "show", "billing", "cust-1")
	if !strings.Contains(out, "blocked  true") || !strings.Contains(out, id[:8]) {
		t.Errorf("streams show:\n%s", out)
	}
	out = mustCLI(t, db, "dlq", "list", "--destination", "billing")
	if !strings.Contains(out, "PoisonMessage") || !strings.Contains(out, "customer closed") {
		t.Errorf("dlq list:\n%s", out)
	}
	if _, err := cli(t, db, "dlq", "replay"); err == nil || !strings.Contains(err.Error(), "--all") {
		t.Errorf("a bulk replay without a filter: %v", err)
	}
	if out := mustCLI(t, db, "dlq", "replay", "--destination", "billing", "--dry-run"); !strings.Contains(out, "would replay 1 entries") {
		t.Errorf("dry run:\n%s", out)
	}
	if out := mustCLI(t, db, "dlq", "replay", "--destination", "billing", "--notes", "customer reopened"); !strings.HasPrefix(out, "replay 1 entries") {
		t.Errorf("replay:\n%s", out)
	}
	if out := mustCLI(t, db, "streams", "show", "billing", "cust-1"); !strings.Contains(out, "blocked  false") {
		t.Errorf("after replay:\n%s", out)
	}
	out = mustCLI(t, db, "audit")
	for _, want := range []string{"cli:alice", "dead_letter", "ticket 7", "replay", `{"destination":"billing"}`, "customer reopened"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit lacks %q:\n%s", want, out)
		}
	}
	if out := mustCLI(t, db, "dlq", "purge", "--older-than", "1h", "--dry-run"); !strings.Contains(out, "would purge 0 entries") {
		t.Errorf("purge dry run:\n%s", out)
	}
	out = mustCLI(t, db, "stats")
	if !strings.Contains(out, "dlq depth") {
		t.Errorf("stats:\n%s", out)
	}
	if _, err := cli(t, db, "messages", "show", "nope"); err == nil || !strings.Contains(err.Error(), "UUID") {
		t.Errorf("show of a bad id: %v", err)
	}
	if _, err := cli(t, db, "-o", "yaml", "stats"); err == nil {
		t.Error("--output yaml was accepted")
	}
}

func TestCLIAgainstServer(t *testing.T) {
	rcv := newReceiver(t)
	_, base := startServe(t, serveConfig("sqlite:"+filepath.Join(t.TempDir(), "b.db"), rcv.srv.URL))
	t.Setenv("BACKSTOP_TOKEN", "")
	if _, err := cli(t, "--server", base, "stats"); err == nil || !strings.Contains(err.Error(), "BACKSTOP_TOKEN") {
		t.Errorf("without a token: %v", err)
	}
	t.Setenv("BACKSTOP_TOKEN", "operate-token-0123456789")
	if out := mustCLI(t, "--server", base, "enqueue", "--topic", "order.paid", "--type", "order.paid"); !strings.HasPrefix(out, "enqueued ") {
		t.Errorf("enqueue by topic: %s", out)
	}
	_, err := cli(t, "--server", base, "enqueue", "--destination", "nowhere", "--type", "x")
	if err == nil || !strings.Contains(err.Error(), "unknown destination") {
		t.Errorf("unknown destination: %v", err)
	}
	waitFor(t, "the delivery", func() bool { return len(rcv.accepted()) == 1 })
	if out := mustCLI(t, "--server", base, "breakers"); !strings.Contains(out, "orders") || !strings.Contains(out, "closed") {
		t.Errorf("breakers:\n%s", out)
	}
	if _, err := cli(t, "--server", "http://127.0.0.1:1", "stats"); err == nil || !strings.Contains(err.Error(), "backstop serve") {
		t.Errorf("no server: %v", err)
	}
}

// With --db there is no configuration, so no routes: a --topic is refused
// saying so, not as if the topic matched no route of some configuration.
func TestTopicWithDBSaysThereAreNoRoutes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	_, err := cli(t, "--db", "sqlite:"+path, "enqueue", "--topic", "order.created", "--type", "order.created")
	if err == nil || !strings.Contains(err.Error(), "has no routes") || !strings.Contains(err.Error(), "--db") {
		t.Fatalf("enqueue --topic with --db: %v, want a refusal saying there are no routes with --db", err)
	}
}
