package outbox

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// MinTime and MaxTime bound the times a message can carry (ScheduledFor):
// the years 1 to 9999 in UTC, what SQLite's columns keep and what JSON
// (RFC 3339) can write. PostgreSQL keeps more, but a time past 9999 could
// then not be shown.
var (
	MinTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// ErrInvalidMessage is matched (errors.Is) by every validation error.
var ErrInvalidMessage = errors.New("outbox: invalid message")

// FieldError is a validation error that names the bad field of a message
// and what is wrong with it. It matches ErrInvalidMessage. Its text never
// holds more than the first few dozen characters of the field's content,
// quoted, so hostile input cannot flood a log.
type FieldError struct {
	// Field names the field: "destination", "stream", "type", "ordering",
	// "payload", "headers", `header name "X-A b"` or `header "X-Note"`.
	Field string
	// Problem says what is wrong, such as "is required" or "holds control
	// character U+000A at byte 1".
	Problem string
}

// Error returns "outbox: invalid message: <field> <problem>".
func (e *FieldError) Error() string {
	return ErrInvalidMessage.Error() + ": " + e.Field + " " + e.Problem
}

// Unwrap returns ErrInvalidMessage.
func (e *FieldError) Unwrap() error { return ErrInvalidMessage }

// Validate checks the fields an application sets against the default
// Limits and names the first bad one (see ValidateLimits).
func (m *Message) Validate() error { return m.ValidateLimits(Limits{}) }

// ValidateLimits checks the fields an application sets and returns a
// *FieldError naming the first bad one, in this order:
//
//   - Destination and Type are required; Destination, Type and Stream
//     are valid UTF-8 without control characters (C0 including NUL, tab,
//     LF and CR; DEL; C1) and no longer than their limits.
//   - Ordering is a known mode.
//   - Payload is no larger than l.MaxPayloadBytes; its content is not
//     looked at.
//   - ScheduledFor is zero or within MinTime and MaxTime.
//   - Headers: at most l.MaxHeaders, whose names and values together are
//     at most l.MaxHeaderBytes; each name is an HTTP token (RFC 9110:
//     letters, digits and !#$%&'*+-.^_`|~); each value is valid UTF-8
//     without control characters other than tab. When several headers
//     are bad, the one with the smallest name is reported.
//
// Other Unicode, such as U+2028 LINE SEPARATOR, is allowed everywhere.
// A Limits with a negative field returns an error matching
// ErrInvalidLimits instead.
func (m *Message) ValidateLimits(l Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	l = l.WithDefaults()
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidMessage)
	}
	for _, f := range []struct {
		name, value string
		max         int
		required    bool
	}{
		{"destination", m.Destination, l.MaxDestinationLen, true},
		{"type", m.Type, l.MaxTypeLen, true},
		{"stream", m.Stream, l.MaxStreamLen, false},
	} {
		switch {
		case f.value == "" && f.required:
			return &FieldError{f.name, "is required"}
		case len(f.value) > f.max:
			return &FieldError{f.name, fmt.Sprintf("is %d bytes, over the limit of %d", len(f.value), f.max)}
		}
		if problem := checkText(f.value, false); problem != "" {
			return &FieldError{f.name, problem}
		}
	}
	if err := m.Ordering.Validate(); err != nil {
		return &FieldError{"ordering", fmt.Sprintf("%q is unknown (want strict, release or none)", shorten(string(m.Ordering)))}
	}
	if len(m.Payload) > l.MaxPayloadBytes {
		return &FieldError{"payload", fmt.Sprintf("is %d bytes, over the limit of %d", len(m.Payload), l.MaxPayloadBytes)}
	}
	if t := m.ScheduledFor; !t.IsZero() && (t.Before(MinTime) || t.After(MaxTime)) {
		return &FieldError{"scheduled_for", fmt.Sprintf("is %s, outside the years 1 to 9999 (UTC) a store keeps",
			t.UTC().Format(time.RFC3339Nano))}
	}
	return checkHeaders(m.Headers, l)
}

// checkHeaders applies ValidateLimits' rules to h.
func checkHeaders(h map[string]string, l Limits) error {
	if len(h) > l.MaxHeaders {
		return &FieldError{"headers", fmt.Sprintf("hold %d entries, over the limit of %d", len(h), l.MaxHeaders)}
	}
	total := 0
	var bad *FieldError
	badName := ""
	for name, value := range h {
		total += len(name) + len(value)
		if bad != nil && name >= badName {
			continue
		}
		if err := checkHeader(name, value); err != nil {
			bad, badName = err, name
		}
	}
	if total > l.MaxHeaderBytes {
		return &FieldError{"headers", fmt.Sprintf("hold %d bytes of names and values, over the limit of %d", total, l.MaxHeaderBytes)}
	}
	if bad != nil {
		return bad
	}
	return nil
}

// CheckHeader returns nil when a message may carry a header name with
// value (a name that is an HTTP token, a value of UTF-8 without control
// characters other than tab), else a *FieldError saying why. Receivers use
// it to leave out a source's headers a message cannot carry instead of
// refusing the message.
func CheckHeader(name, value string) error {
	if err := checkHeader(name, value); err != nil {
		return err
	}
	return nil
}

// checkHeader checks one header's name and value.
func checkHeader(name, value string) *FieldError {
	if name == "" {
		return &FieldError{"header name", "is empty"}
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isTokenChar(c) {
			return &FieldError{fmt.Sprintf("header name %q", shorten(name)),
				fmt.Sprintf("is not an HTTP token: byte 0x%02X at byte %d", c, i)}
		}
	}
	if problem := checkText(value, true); problem != "" {
		return &FieldError{fmt.Sprintf("header %q", shorten(name)), "value " + problem}
	}
	return nil
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110,
// section 5.6.2).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// checkText returns what is wrong with s, or "" when s is valid UTF-8
// without control characters (C0, DEL, C1); a tab is allowed when
// allowTab.
func checkText(s string, allowTab bool) string {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && !(allowTab && c == '\t')) || c == 0x7f {
				return fmt.Sprintf("holds control character U+%04X at byte %d", c, i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Sprintf("holds invalid UTF-8 (byte 0x%02X) at byte %d", c, i)
		case r >= 0x80 && r <= 0x9f:
			return fmt.Sprintf("holds control character U+%04X at byte %d", r, i)
		}
		i += size
	}
	return ""
}

// shorten returns at most the first 40 bytes of s, cut on a rune
// boundary, followed by "..." when it was longer; %q then makes it
// printable.
func shorten(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
