package config

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"sqlite:./backstop.db":                              "sqlite:./backstop.db",
		"postgres://u:Sesame@h/db":                          "postgres://u:***@h/db",
		"postgres://u@h/db":                                 "postgres://u@h/db",
		"postgres://u@h/db?password=Sesame&sslmode=require": "postgres://u@h/db?password=***&sslmode=require",
		"postgres://u:Sesame@h1:5432,h2:5432/db":            "postgres://u:***@h1:5432,h2:5432/db",
		"postgres://u:Ses#ame@h/db":                         "postgres://u:***@h/db",
		"postgress://u:Sesame@h/db":                         "postgress://u:***@h/db",
		"host=h user=u password=Sesame dbname=d":            "host=h user=u password=*** dbname=d",
		`host=h password='Ses ame\' x' dbname=d`:            "host=h password=*** dbname=d",
		"https://u:Sesame@h/hook?token=Sesame&x=1#top":      "https://u:***@h/hook?token=***&x=***#top",
		"amqp://u:Ses/ame@h:5672/":                          "amqp://u:***@h:5672/",
		"amqp://guest:Sesame@h:5672/?heartbeat=10":          "amqp://guest:***@h:5672/?heartbeat=10",
		"nats://Sesame@h:4222":                              "nats://***@h:4222",
		"nats://Ses#ame@h:4222":                             "nats://***@h:4222",
		"http://h/hook":                                     "http://h/hook",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestErrorsHideSecrets: a db or url the configuration refuses is quoted
// in the error without its password; the error quoted it whole (a
// key=value connection string, a misspelt scheme, a password holding a
// '#' or '/' that keeps the URL from parsing). Summary hides a password
// given as a query parameter.
func TestErrorsHideSecrets(t *testing.T) {
	for _, file := range []string{
		"db: 'host=127.0.0.1 user=u password=Sesame dbname=d'\n",
		"db: 'postgress://u:Sesame@127.0.0.1/d'\n",
		"destinations:\n  - {name: a, type: webhook, url: 'https://u:Ses#ame@example.com/'}\n",
		"destinations:\n  - {name: a, type: rabbitmq, url: 'amqp://u:Ses/ame@127.0.0.1:5672/'}\n",
		"destinations:\n  - {name: a, type: webhook, url: 'http://127.0.0.1:1/'}\n" +
			"sources:\n  - {inbox: i, type: nats, url: 'nats://u:Ses#ame@127.0.0.1:4222', stream: S, consumer: c, forward: {to: [a]}}\n",
	} {
		_, err := Parse([]byte(file), nil)
		if err == nil {
			t.Fatalf("Parse(%q) accepted it", file)
		}
		if strings.Contains(err.Error(), "Sesame") || strings.Contains(err.Error(), "ame@") {
			t.Errorf("Parse(%q): the error %q shows the password", file, err)
		}
	}
	c, err := Parse([]byte("db: 'postgres://u@127.0.0.1/d?password=Sesame'\n"+
		"destinations:\n  - {name: a, type: webhook, url: 'https://example.com/hook?token=Sesame'}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Summary(); strings.Contains(s, "Sesame") {
		t.Errorf("Summary shows a password: %s", s)
	}
}
