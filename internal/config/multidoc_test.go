package config

import (
	"strings"
	"testing"
)

// A second YAML document (after ---) was dropped without a word: only the
// first was read, so its settings (here the relay's workers, or a
// destination's secret) never applied and config check said ok. It is
// refused naming its line; a lone --- at the start or a --- with nothing
// after it is still one document.
func TestSecondYAMLDocumentIsRefused(t *testing.T) {
	for _, doc := range []string{
		hostileBase + "---\nrelay:\n  workers: 3\n",
		hostileBase + "---\n---\nrelay:\n  workers: 3\n",
	} {
		c, err := Parse([]byte(doc), env(nil))
		if err == nil {
			t.Errorf("%q: parsed (workers %d), want an error for the second document", doc, c.Relay.Workers)
			continue
		}
		if !strings.Contains(err.Error(), "line ") || !strings.Contains(err.Error(), "document") {
			t.Errorf("%q: %v, want an error naming the second document's line", doc, err)
		}
	}
	for _, doc := range []string{"---\n" + hostileBase, hostileBase + "---\n", hostileBase + "...\n", "---\n" + hostileBase + "...\n"} {
		if _, err := Parse([]byte(doc), env(nil)); err != nil {
			t.Errorf("%q: %v, want one document parsed", doc, err)
		}
	}
}
