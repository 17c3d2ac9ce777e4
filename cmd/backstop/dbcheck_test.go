package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// otherProgramsDB makes a SQLite file at path holding one table of another
// program's.
func otherProgramsDB(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE app (x int)`); err != nil {
		t.Fatal(err)
	}
}

// tableNames lists the tables of the SQLite file at path.
func tableNames(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

// migrate --table-prefix creates the tables under that prefix (it created
// backstop_ ones, which the other commands with the same prefix then
// refused).
func TestMigrateTakesTheTablePrefix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	otherProgramsDB(t, path)
	mustCLI(t, "migrate", "--db", "sqlite:"+path, "--table-prefix", "foo_")
	for _, n := range tableNames(t, path) {
		if strings.HasPrefix(n, "backstop_") {
			t.Fatalf("migrate --table-prefix foo_ made %s", n)
		}
	}
	mustCLI(t, "--db", "sqlite:"+path, "--table-prefix", "foo_", "messages", "list")
}

// The check that refuses another program's database holds for SQLite
// paths with #, % or a file: prefix: it opened another file (creating
// "o" for "o#1.db"), found nothing, and let Backstop's tables into the
// other program's database.
func TestDBCheckHoldsForOddSQLitePaths(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"o#1.db", "o%41.db", "o 1.db", "plain.db"} {
		path := filepath.Join(dir, name)
		otherProgramsDB(t, path)
		arg := "sqlite:" + path
		if name == "plain.db" {
			arg = "sqlite:file:" + path
		}
		if _, err := cli(t, "--db", arg, "messages", "list"); err == nil || !strings.Contains(err.Error(), "--table-prefix") {
			t.Errorf("%s: %v, want the refusal naming --table-prefix", arg, err)
		}
		if got := tableNames(t, path); len(got) != 1 {
			t.Errorf("%s: tables %v after the refusal, want only the program's own", arg, got)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "o")); err == nil {
		t.Error(`the check created the file "o"`)
	}
}

// --output json is valid JSON (UTF-8) when a payload is JSON but for
// invalid UTF-8 in a string: the payload goes as base64. It was written
// byte for byte.
func TestJSONOutputOfAPayloadWithInvalidUTF8(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "j.db")
	out := mustCLI(t, "--db", db, "enqueue", "--destination", "d", "--type", "t", "--payload", "{\"a\":\"\xff\"}", "-o", "json")
	var enq struct {
		IDs []string `json:"ids"`
	}
	if err := json.Unmarshal([]byte(out), &enq); err != nil || len(enq.IDs) != 1 {
		t.Fatalf("enqueue: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"messages", "show", enq.IDs[0]}, {"messages", "list"}} {
		out := mustCLI(t, append([]string{"--db", db, "-o", "json"}, args...)...)
		if !utf8.ValidString(out) || !json.Valid([]byte(out)) {
			t.Errorf("%s -o json is not valid JSON:\n%q", args, out)
		}
		if !strings.Contains(out, `"payload_base64"`) {
			t.Errorf("%s: want the payload in base64:\n%s", args, out)
		}
	}
}

// breakers with --db lists the circuits the store keeps for the fleet (it
// listed none while one was open).
func TestBreakersWithDBListTheFleetsCircuits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	st, err := sqlite.Open(context.Background(), path, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.OpenCircuit(context.Background(), "down", "relay-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	out := mustCLI(t, "--db", "sqlite:"+path, "breakers")
	if !strings.Contains(out, "down") || !strings.Contains(out, "open") {
		t.Errorf("breakers --db:\n%s\nwant down, open", out)
	}
}
