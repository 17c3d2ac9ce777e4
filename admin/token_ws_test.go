package admin_test

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
)

// admin.New refuses a token no request can carry (white space at its end,
// which a server trims from the header, or a control character, which a
// client refuses to send): it was taken, and every request made with it
// got 401.
func TestTokenNoRequestCanCarryIsRefused(t *testing.T) {
	st := openSQLite(t)
	for _, secret := range []string{"trailing-space-token-123 ", "newline-token-1234567\n", "nul-token\x00-1234567"} {
		_, err := admin.New(admin.Config{Store: st, Tokens: []admin.Token{{Name: "ops", Secret: secret, Role: admin.RoleOperate}}})
		if err == nil || !strings.Contains(err.Error(), "Tokens[0]") {
			t.Errorf("secret %q: %v, want a refusal naming Config.Tokens[0]", secret, err)
		}
	}
	// One a request can carry works: a leading space, inner spaces.
	for _, secret := range []string{" leading-space-token-12", "inner space token 12345"} {
		a := newAPI(t, st, func(c *admin.Config) {
			c.Tokens = append(c.Tokens, admin.Token{Name: "odd", Secret: secret, Role: admin.RoleRead})
		})
		cl := &admin.Client{BaseURL: a.srv.URL, Token: secret, HTTPClient: a.rd.HTTPClient}
		if _, err := cl.Stats(a.ctx); err != nil {
			t.Errorf("secret %q: %v", secret, err)
		}
	}
}

// admin.New refuses two tokens of one name: the audit log names the actor
// by its token's name, and could not tell them apart.
func TestTokensOfOneNameAreRefused(t *testing.T) {
	_, err := admin.New(admin.Config{Store: openSQLite(t), Tokens: []admin.Token{
		{Name: "ops", Secret: strings.Repeat("a", 32), Role: admin.RoleOperate},
		{Name: "ops", Secret: strings.Repeat("b", 32), Role: admin.RoleRead}}})
	if err == nil || !strings.Contains(err.Error(), "Tokens[1].Name") {
		t.Fatalf("admin.New = %v, want a refusal naming Config.Tokens[1].Name", err)
	}
}
