package webhook_test

import (
	"context"
	"strings"
	"testing"

	"github.com/backstophq/backstop/transport/webhook"
)

// The error refusing a message for one of its headers names the header
// by the first few dozen characters of its name, as outbox.FieldError
// promises: a name of thousands of characters went into the error whole,
// once or twice, and from there into every log line and the dead letter.
func TestRefusalNamesALongHeaderShortly(t *testing.T) {
	t.Parallel()
	tr, _ := serve(t, answer(204, ""), webhook.Config{})
	long := "X-" + strings.Repeat("a", 6000)
	for name, h := range map[string]map[string]string{
		"blank-edged value":  {long: " padded"},
		"one header in case": {long: "a", strings.ToUpper(long): "b"},
	} {
		m := message()
		m.Headers = h
		err := tr.Deliver(context.Background(), m)
		if err == nil {
			t.Fatalf("%s: delivered", name)
		}
		if len(err.Error()) > 400 {
			t.Errorf("%s: the error is %d bytes: %.120s...", name, len(err.Error()), err)
		}
	}
}
