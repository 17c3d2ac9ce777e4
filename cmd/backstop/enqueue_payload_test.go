package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// enqueue writes the payload it is given byte for byte, JSON or not: a
// JSON payload used to travel to the admin API as a JSON value, which
// encoding/json compacts and HTML-escapes, so a pretty-printed file lost
// its layout and "<", ">" and "&" arrived as \u003c, \u003e and \u0026.
func TestEnqueueWritesThePayloadAsGiven(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.db")
	file := filepath.Join(dir, "order.json")
	pretty := "{\n  \"note\": \"<b>fish & chips</b>\",\n  \"line\": \"\u2028\"\n}\n"
	if err := os.WriteFile(file, []byte(pretty), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"--payload-file", []string{"--payload-file", file}, pretty},
		{"--payload", []string{"--payload", `{"a": [1, 2], "b": "x>y"}`}, `{"a": [1, 2], "b": "x>y"}`},
	} {
		args := append([]string{"--db", "sqlite:" + path, "-o", "json", "enqueue", "--destination", "d", "--type", "t"}, c.args...)
		var res struct {
			IDs []string `json:"ids"`
		}
		if err := json.Unmarshal([]byte(mustCLI(t, args...)), &res); err != nil || len(res.IDs) != 1 {
			t.Fatalf("%s: enqueue answered %v %+v", c.name, err, res)
		}
		st, err := sqlite.Open(context.Background(), path, store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.Get(context.Background(), uuid.MustParse(res.IDs[0]))
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Payload) != c.want {
			t.Errorf("%s: payload written %q, want %q", c.name, m.Payload, c.want)
		}
	}
}

// A --payload-file larger than a message may hold is refused at once,
// naming the flag and the limit, without being read: it was read whole
// into memory (a multi-gigabyte file by mistake took that much), encoded
// and sent, for the server to answer "request body too large".
func TestEnqueueRefusesAPayloadFileOverTheLimit(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "huge.bin")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(8 << 20); err != nil { // sparse: nothing written
		t.Fatal(err)
	}
	f.Close()
	_, err = cli(t, "--db", "sqlite:"+filepath.Join(dir, "p.db"), "enqueue", "--destination", "d", "--type", "t", "--payload-file", file)
	if err == nil || !strings.Contains(err.Error(), "--payload-file") || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("enqueue of an 8 MiB payload file: %v, want a refusal naming --payload-file and the limit of 1048576 bytes", err)
	}
}
