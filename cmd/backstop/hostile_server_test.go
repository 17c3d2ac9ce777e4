package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/backstophq/backstop/admin"
)

// hostileText is what a server (or the rows behind it: error texts,
// stream names, notes written by anyone) may hand the CLI: terminal
// escapes that retitle the window, clear the screen or fake a line, and
// invisible characters that reorder what the operator reads.
const hostileText = "x\x1b]0;pwned\x07\x1b[2J\r\nFAKE LINE\u202eevil\u200b\u009b31m"

// fill sets every string of v (a pointer) to hostileText, every slice to
// one element, every map to one key and every pointer to a value.
func fill(v reflect.Value, depth int) {
	if depth > 6 {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Elem() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(&time.Time{}))
			v.Elem().Set(reflect.ValueOf(time.Now()))
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.String:
		v.SetString(hostileText)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Now()))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // []byte, json.RawMessage
			b, _ := json.Marshal(hostileText)
			v.SetBytes(b)
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}

func hostile[T any]() any {
	var v T
	fill(reflect.ValueOf(&v).Elem(), 0)
	return v
}

// TestCLITablesShowHostileTextEscaped: whatever the server's answers hold
// in any string (error texts, stream and destination names, notes,
// actors, reasons, paths), the CLI's tables print no control or invisible
// character raw.
func TestCLITablesShowHostileTextEscaped(t *testing.T) {
	routes := map[string]any{
		"GET /v1/dlq":                      hostile[admin.List[admin.Entry]](),
		"GET /v1/dlq/{id}":                 hostile[admin.Entry](),
		"POST /v1/dlq/{id}/replay":         hostile[admin.ActionResult](),
		"POST /v1/dlq/resolve":             hostile[admin.BulkResult](),
		"GET /v1/messages":                 hostile[admin.List[admin.Message]](),
		"GET /v1/messages/{id}":            hostile[admin.Message](),
		"POST /v1/messages/{id}/reset":     hostile[admin.ActionResult](),
		"POST /v1/messages":                hostile[admin.EnqueueResponse](),
		"GET /v1/streams/{d}/{s}":          hostile[admin.Stream](),
		"POST /v1/streams/{d}/{s}/release": hostile[admin.ActionResult](),
		"GET /v1/stats":                    hostile[admin.Stats](),
		"GET /v1/breakers":                 hostile[admin.List[admin.Breaker]](),
		"GET /v1/audit":                    hostile[admin.List[admin.AuditRecord]](),
		"GET /v1/workflows/runs":           hostile[admin.List[admin.WorkflowRun]](),
		"GET /v1/workflows/runs/{id}":      hostile[admin.WorkflowRun](),
	}
	mux := http.NewServeMux()
	for pattern, v := range routes {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	server := "--server=" + srv.URL
	for _, args := range [][]string{
		{"dlq", "list"}, {"dlq", "show", "e1"}, {"dlq", "replay", "e1"}, {"dlq", "resolve", "--all"},
		{"messages", "list"}, {"messages", "show", "m1"}, {"messages", "reset", "m1"},
		{"enqueue", "--destination", "d", "--type", "t"},
		{"streams", "show", "d", "s"}, {"streams", "release", "d", "s"},
		{"stats"}, {"breakers"}, {"audit"}, {"workflows", "runs", "list"}, {"workflows", "runs", "show", "r1"},
	} {
		out, err := cli(t, append([]string{server}, args...)...)
		if err != nil {
			t.Errorf("backstop %s: %v", strings.Join(args, " "), err)
			continue
		}

		for _, r := range out {
			if r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029') {
				t.Errorf("backstop %s printed %U raw:\n%q", strings.Join(args, " "), r, out)
				break
			}
		}
		if strings.Contains(out, "\nFAKE LINE") {
			t.Errorf("backstop %s let a value start a line of its own:\n%s", strings.Join(args, " "), out)
		}
	}
}

// TestBulkActionStoppedPartwayFails: a bulk action the server stopped
// after some pages (a page the store did not answer in time) fails the
// command, exit status 1, with the server's word on how far it went; with
// --output json too, whose standard output then holds nothing to parse
// as a result.
func TestBulkActionStoppedPartwayFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(admin.Problem{Type: "about:blank", Title: "bulk action stopped", Status: http.StatusServiceUnavailable,
			Detail: "it was applied to the first 500 entries, recorded in the audit log; run it again for the rest"})
	}))
	defer srv.Close()
	for _, args := range [][]string{
		{"dlq", "replay", "--all"}, {"-o", "json", "dlq", "resolve", "--destination", "d"},
		{"dlq", "recover", "--destination", "d", "--since", "-1h"}, {"dlq", "purge", "--older-than", "1h"},
	} {
		out, err := cli(t, append([]string{"--server=" + srv.URL}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "first 500 entries") {
			t.Errorf("backstop %s stopped partway: %v, want an error saying how far it went", strings.Join(args, " "), err)
		}
		if out != "" {
			t.Errorf("backstop %s stopped partway printed %q as if it were done", strings.Join(args, " "), out)
		}
	}
}
