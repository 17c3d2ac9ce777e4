package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
)

// A connection string that does not parse is refused without being
// quoted: pgx quotes it whole with only its password hidden, and every
// command that opens a store printed the secrets of its query (an API
// key, a setting passed with options=-c).
func TestOpenDoesNotQuoteAConnectionStringThatDoesNotParse(t *testing.T) {
	for _, c := range []struct{ url, secret, why string }{
		{"postgres://u:pw-S3CRET@127.0.0.1:5432/test?sslmode=disable=x&apikey=TOPSECRETK3Y", "TOPSECRETK3Y", "sslmode"},
		{"postgres://u:pw-S3CRET@127.0.0.1:5432/test?sslmode=bogus&options=-c%20app.api_key%3DTOPSECRET2", "TOPSECRET2", "sslmode"},
		{"postgres://u:pw-S3CRET@127.0.0.1:5432/test?pool_max_conns=x&token=TOPSECRET3", "TOPSECRET3", "pool_max_conns"},
		{"host=127.0.0.1 password=pw-S3CRET sslmode=nope apikey=TOPSECRET4", "TOPSECRET4", "sslmode"},
	} {
		_, err := postgres.Open(context.Background(), c.url, store.Config{})
		if err == nil {
			t.Fatalf("%s: Open succeeded", c.url)
		}
		msg := err.Error()
		if strings.Contains(msg, c.secret) || strings.Contains(msg, "S3CRET") || !strings.Contains(msg, c.why) {
			t.Errorf("Open(%s) = %q, want an error naming %s without the secrets", c.url, msg, c.why)
		}
	}
}
