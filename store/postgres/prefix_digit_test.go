package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestTablePrefixStartingWithADigit: store.Config.Validate took a
// TablePrefix of a-z, 0-9 and _ in any order, but the prefix begins the
// table names the store writes unquoted, and a name starting with a digit
// is not a PostgreSQL identifier: New accepted "1x_" and Migrate then
// failed with a syntax error ("trailing junk after numeric literal at or
// near \"1x_migrations\""). New must refuse it, naming the field; a
// prefix with a digit later on works.
func TestTablePrefixStartingWithADigit(t *testing.T) {
	schema := newSchema(t)
	_, err := New(schemaPool(t, schema, 2), store.Config{TablePrefix: "1x_"})
	if err == nil || !strings.Contains(err.Error(), "TablePrefix") {
		t.Fatalf("New with TablePrefix 1x_: %v, want a refusal naming TablePrefix", err)
	}
	s, err := New(schemaPool(t, schema, 2), store.Config{TablePrefix: "x1_"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate with TablePrefix x1_: %v", err)
	}
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "d", Type: "t", Stream: "s"}); err != nil {
		t.Fatal(err)
	}
}
