package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Flags that contradict each other, or that cannot be sent as they are,
// are refused, naming them: --db with
// --server worked on the store and ignored the server, and an entry's ID
// with --all acted on that one entry, where the operator may have meant
// every entry.
func TestConflictingFlagsAreRefused(t *testing.T) {
	db := "--db=sqlite:" + filepath.Join(t.TempDir(), "b.db")
	payloadFile := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(payloadFile, []byte(`{"from":"the file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{db, "--server", "http://127.0.0.1:1", "dlq", "list"}, "--server"},
		{[]string{db, "dlq", "resolve", "0193a0a0-0000-7000-8000-000000000001", "--all"}, "--all"},
		{[]string{db, "dlq", "replay", "0193a0a0-0000-7000-8000-000000000001", "--all"}, "--all"},
		// --payload was dropped for the file's bytes, silently.
		{[]string{db, "enqueue", "--destination", "d", "--type", "t", "--payload", "x", "--payload-file", payloadFile}, "payload-file"},
		// Sent through encoding/json, a byte that is not UTF-8 became
		// U+FFFD: two streams or keys differing only there were one.
		{[]string{db, "enqueue", "--destination", "d", "--type", "t", "--stream", "c\xffd"}, "stream is not valid UTF-8"},
		{[]string{db, "enqueue", "--destination", "d", "--type", "t", "--idempotency-key", "k\xfe"}, "idempotency_key is not valid UTF-8"},
		// An unset variable: migrate made and migrated ./backstop.db, exit 0.
		{[]string{"migrate", "--db", ""}, "--db is empty"},
		{[]string{"--db=", "dlq", "list"}, "--db is empty"},
		{[]string{"serve", "--db", " "}, "--db is empty"},
	} {
		out, err := cli(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("backstop %s: %v (want an error naming %s)\n%s", strings.Join(c.args, " "), err, c.want, out)
		}
	}
	// BACKSTOP_SERVER in the environment does not conflict with --db.
	t.Setenv("BACKSTOP_SERVER", "http://127.0.0.1:1")
	mustCLI(t, db, "dlq", "list")
}

// A --server holding a query or a fragment is refused without quoting it:
// joined to the path, the query took the path into itself, and a
// connection error printed the secret it held.
func TestServerWithAQueryIsRefused(t *testing.T) {
	for _, server := range []string{"http://127.0.0.1:1/?k=S3CRET", "http://127.0.0.1:1/#S3CRET"} {
		out, err := cli(t, "--server", server, "dlq", "list")
		if err == nil || !strings.Contains(err.Error(), "query or a fragment") || strings.Contains(err.Error()+out, "S3CRET") {
			t.Errorf("--server %s: %v\n%s", server, err, out)
		}
	}
}
