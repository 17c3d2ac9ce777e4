package main

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
)

func TestWithConnectTimeout(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u@h:5432/db":                "postgres://u@h:5432/db?connect_timeout=10",
		"postgres://u@h/db?sslmode=disable":     "postgres://u@h/db?sslmode=disable&connect_timeout=10",
		"postgres://u@h/db?connect_timeout=3":   "postgres://u@h/db?connect_timeout=3",
		"postgresql://u@h/db?search_path=a%2Cb": "postgresql://u@h/db?search_path=a%2Cb&connect_timeout=10",
		"postgres://u@h/db?options=-c%20x%3Dy":  "postgres://u@h/db?options=-c%20x%3Dy&connect_timeout=10",
	} {
		if got := withConnectTimeout(in); got != want {
			t.Errorf("withConnectTimeout(%q) = %q, want %q", in, got, want)
		}
	}
}

// A database that takes the connection and never answers: opening the
// store ends with an error after the default connect timeout. It hung for
// ever, serve with no line of output.
func TestOpenStoreGivesUpOnASilentDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 10 s connect timeout")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second) // a safety net only
	defer cancel()
	st, err := openStore(ctx, "postgres://postgres@"+ln.Addr().String()+"/test", store.Config{})
	if err == nil {
		st.Close()
		t.Fatal("opened a store on a database that never answered")
	}
	if ctx.Err() != nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("openStore: %v (safety net reached: %v), want the connect timeout", err, ctx.Err())
	}
}

func TestAddSaturating(t *testing.T) {
	huge := time.Duration(math.MaxInt64 - int64(time.Second))
	if got := addSaturating(huge, 5*time.Second); got != math.MaxInt64 {
		t.Errorf("addSaturating near the maximum = %v, want the maximum", got)
	}
	if got := addSaturating(3*time.Second, 5*time.Second); got != 8*time.Second {
		t.Errorf("addSaturating(3s, 5s) = %v", got)
	}
}

// A URL whose parameters hold a space (libpq's options=-c%20search_path%3D...,
// the usual way to pick a schema) opens the store as it says. Adding
// connect_timeout re-encoded the query, the space became a '+' that pgx
// reads as a '+', and the server refused the connection (unrecognized
// configuration parameter "+search_path"); a search_path of a quoted name
// with a space named another schema.
func TestOpenStoreKeepsTheURLsParameters(t *testing.T) {
	schema := testenv.NewSchema(t, "cli_url_")
	u := testenv.PostgresURL()
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	ctx := context.Background()
	st, err := openStore(ctx, u+sep+"options=-c%20search_path%3D"+schema+"&application_name=backstop%20migrate", store.Config{})
	if err != nil {
		t.Fatalf("openStore with options=-c search_path=...: %v", err)
	}
	defer st.Close()
	var app string
	if err := st.(*postgres.Store).Pool().QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&app); err != nil {
		t.Fatal(err)
	}
	if app != "backstop migrate" {
		t.Fatalf("application_name %q, want %q", app, "backstop migrate")
	}
	var n int
	if err := st.(*postgres.Store).Pool().QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'backstop_outbox'`,
		schema).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d outbox tables in %s (%v), want 1", n, schema, err)
	}
}
