package config

import (
	"strings"
	"testing"
)

// A variable whose value YAML reads as null (~, null, Null, NULL) is the
// text it says, not "no value": secret: ${HOOK_SECRET} with HOOK_SECRET=~
// left the webhook's secret empty, and the webhook unsigned, without a
// word, and workers: ${WORKERS} with WORKERS=null took the default.
func TestVariableThatReadsAsNullIsItsText(t *testing.T) {
	for _, v := range []string{"~", "null", "Null", "NULL"} {
		c, err := Parse([]byte(hostileBase+"    secret: ${HOOK_SECRET}\n"), env(map[string]string{"HOOK_SECRET": v}))
		if err == nil && c.Destinations[0].Secret == "" {
			t.Errorf("HOOK_SECRET=%s: the webhook's secret is empty (unsigned), want %q or an error naming the key", v, v)
		}
		_, err = Parse([]byte("relay:\n  workers: ${WORKERS}\n"+hostileBase), env(map[string]string{"WORKERS": v}))
		if err == nil || !strings.Contains(err.Error(), "relay.workers") {
			t.Errorf("WORKERS=%s: %v, want an error naming relay.workers", v, err)
		}
	}
}
