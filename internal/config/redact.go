package config

import (
	"net/url"
	"regexp"
	"strings"
)

// Redact hides the secrets of a URL or a PostgreSQL connection string,
// for logs and messages: the password of its user info, the value of every
// query parameter that is not a known setting (password=, sslpassword=, a
// webhook's ?token=), and the password= of a key=value string. A value
// that does not parse as a URL (a password holding '#', '/' or a space),
// or parses without user info while holding an @, is redacted as text:
// everything between :// and its last @ after the user's name is hidden.
// A NATS URL's user name without a password is a token, and is hidden too.
func Redact(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		return kvPassword.ReplaceAllString(s, "${1}=***")
	}
	// A URL whose user info holds a '#', '/' or '?' may parse as
	// another: nats://Ses#ame@h:4222 is the host Ses and the fragment
	// ame@h:4222. An @ that is not the user info's end is redacted as
	// text.
	if u, err := url.Parse(s); err == nil && (u.User != nil || !strings.Contains(s, "@")) {
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), "***")
			} else if natsScheme[u.Scheme] {
				u.User = url.User("***") // nats://TOKEN@host: the name is a token
			}
		}
		q, frag := u.RawQuery, u.EscapedFragment()
		u.RawQuery, u.Fragment, u.RawFragment = "", "", ""
		out := strings.Replace(strings.Replace(u.String(), ":%2A%2A%2A@", ":***@", 1), "://%2A%2A%2A@", "://***@", 1)
		if q != "" {
			out += "?" + redactQuery(q)
		}
		if frag != "" {
			out += "#" + frag
		}
		return out
	}
	rest := s[i+3:]
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		user, _, ok := strings.Cut(rest[:at], ":")
		switch {
		case ok:
			user += ":***"
		case natsScheme[strings.ToLower(s[:i])]:
			user = "***"
		}
		rest = user + rest[at:]
	}
	if host, q, ok := strings.Cut(rest, "?"); ok {
		rest = host + "?" + redactQuery(q)
	}
	return s[:i+3] + rest
}

// natsScheme are the schemes of NATS URLs, whose user name alone is a
// token.
var natsScheme = map[string]bool{"nats": true, "tls": true, "ws": true, "wss": true}

// kvPassword matches the password of a key=value connection string,
// quoted or not.
var kvPassword = regexp.MustCompile(`(?i)\b(password|sslpassword)\s*=\s*(?:'(?:[^'\\]|\\.)*'?|\S*)`)

// redactQuery hides the value of every parameter of the query q whose
// name is not in knownSettings.
func redactQuery(q string) string {
	params := strings.Split(q, "&")
	for i, p := range params {
		k, v, ok := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if ok && v != "" && (err != nil || !knownSettings[strings.ToLower(name)]) {
			params[i] = k + "=***"
		}
	}
	return strings.Join(params, "&")
}

// knownSettings are the query parameters of database and broker URLs
// whose values are not secrets, shown as they are.
var knownSettings = map[string]bool{
	// PostgreSQL (libpq, pgx)
	"sslmode": true, "sslrootcert": true, "sslcert": true, "sslkey": true, "sslsni": true,
	"connect_timeout": true, "application_name": true, "target_session_attrs": true,
	"search_path": true, "statement_timeout": true, "default_query_exec_mode": true,
	"pool_max_conns": true, "pool_min_conns": true, "pool_max_conn_lifetime": true,
	"pool_max_conn_idle_time": true, "pool_health_check_period": true,
	// AMQP
	"heartbeat": true, "connection_timeout": true, "channel_max": true, "frame_max": true,
	"auth_mechanism": true, "server_name_indication": true, "cacertfile": true, "certfile": true,
	"keyfile": true, "verify": true, "fail_if_no_peer_cert": true,
}
