package store

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
)

// ErrUndecodable is matched (errors.Is) by every ColumnError: a row holds a
// value the store cannot read back as a message.
var ErrUndecodable = errors.New("store: undecodable row")

// ColumnError says which column of an outbox row holds a value the store
// cannot decode, and what the value is. Rows written with plain SQL by
// another language can hold anything the schema lets through; the store
// quarantines such a row (Result.Quarantined) instead of failing the claim.
type ColumnError struct {
	// Column is the column's name, such as "attempts".
	Column string
	// Value is the value as the database returned it (a string, []byte,
	// int64, float64, time, or nil for NULL).
	Value any
	// Problem says what is wrong, such as "is not an integer".
	Problem string
}

// Error returns, for example, `column attempts: "x" is not an integer`.
func (e *ColumnError) Error() string {
	return "column " + e.Column + ": " + FormatValue(e.Value) + " " + e.Problem
}

// Unwrap returns ErrUndecodable.
func (e *ColumnError) Unwrap() error { return ErrUndecodable }

// maxShownValue bounds how much of a bad value an error shows.
const maxShownValue = 100

// FormatValue spells a database value for an error message: strings
// quoted (cleaned, cut to 100 characters), bytes as x'hex' (cut), NULL,
// numbers and times as they are.
func FormatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		c := outbox.CleanText(x, maxShownValue)
		if len(c) < len(x) {
			return strconv.Quote(c) + "..."
		}
		return strconv.Quote(c)
	case []byte:
		if len(x) > maxShownValue/2 {
			return "x'" + hex.EncodeToString(x[:maxShownValue/2]) + "'..."
		}
		return "x'" + hex.EncodeToString(x) + "'"
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case fmt.Stringer:
		return strconv.Quote(outbox.CleanText(x.String(), maxShownValue))
	}
	return outbox.CleanText(fmt.Sprint(v), maxShownValue)
}

// MaxStatus is the largest status a stored message may have: the flags of
// the work-coordination design use bits 0 to 15 (StatusFailed is bit 15).
const MaxStatus = 1<<16 - 1

// MaxStoredHeaderBytes bounds the headers of a claimed row as the store
// keeps them (JSON): headers within outbox.MaxLimits take at most about
// six times their names and values once escaped, and a claim does not
// read headers larger than this (CheckClaimedSize).
const MaxStoredHeaderBytes = 8 << 20

// CheckClaimedSize returns a *ColumnError when a claimed row's payload
// (payload bytes) or headers (headers bytes, as the store keeps them) are
// larger than any message may carry (outbox.MaxLimits.MaxPayloadBytes,
// MaxStoredHeaderBytes): plain SQL does not check them, and the claim
// reads the sizes in place of such values, so that one row cannot make
// the relay hold a gigabyte. The row is quarantined, not delivered.
func CheckClaimedSize(payload, headers int64) error {
	switch {
	case payload > int64(outbox.MaxLimits.MaxPayloadBytes):
		return &ColumnError{Column: "payload", Value: fmt.Sprintf("%d bytes", payload),
			Problem: fmt.Sprintf("is over the largest payload a message may carry (%d bytes); it was not read", outbox.MaxLimits.MaxPayloadBytes)}
	case headers > MaxStoredHeaderBytes:
		return &ColumnError{Column: "headers", Value: fmt.Sprintf("%d bytes", headers),
			Problem: fmt.Sprintf("are over the largest headers a message may carry (%d bytes stored); they were not read", MaxStoredHeaderBytes)}
	}
	return nil
}

// DecodeHeaders reads an outbox row's headers column, a JSON object: nil
// for an empty column or object; values that are not strings are kept in
// their JSON spelling. Anything but an object, or an object of more
// headers, or more bytes of names and values, than outbox.MaxLimits lets a
// message carry, is an error whose text completes a ColumnError ("is not
// a JSON object").
func DecodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 || string(b) == "{}" {
		// no headers, the usual case, and how both stores spell an empty
		// object: unmarshalling it was a third of decoding a claimed row
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
		return nil, errors.New("is not a JSON object")
	}
	if len(obj) == 0 {
		return nil, nil
	}
	if len(obj) > outbox.MaxLimits.MaxHeaders {
		return nil, fmt.Errorf("holds %d headers, over the most a message may carry (%d)", len(obj), outbox.MaxLimits.MaxHeaders)
	}
	h := make(map[string]string, len(obj))
	total := 0
	for k, v := range obj {
		var s string
		if json.Unmarshal(v, &s) == nil {
			h[k] = s
		} else {
			h[k] = string(v)
		}
		total += len(k) + len(h[k])
	}
	if total > outbox.MaxLimits.MaxHeaderBytes {
		return nil, fmt.Errorf("holds %d bytes of names and values, over the most a message may carry (%d)", total, outbox.MaxLimits.MaxHeaderBytes)
	}
	return h, nil
}

// UndecodableKey is the dlq.Entry Metadata key under which an operator's
// view of a dead-letter entry names the values of its row that the store
// could not read (ShowUndecodableEntry).
const UndecodableKey = "undecodable"

// ShowUndecodableEntry readies for an operator's view (a list, Get, a bulk
// action's page) a dead-letter entry whose row holds values the store
// cannot read, each named by one of errs (a *ColumnError): the entry keeps
// what could be read (the rest zero) and its Metadata[UndecodableKey]
// names what could not. Rows written or changed with plain SQL (another
// language's tool, an operator's UPDATE) can hold anything the schema lets
// through, and one of them must not make the whole list, or a bulk action
// over it, fail.
func ShowUndecodableEntry(e *dlq.Entry, errs []error) {
	if len(errs) == 0 {
		return
	}
	parts := make([]string, len(errs))
	for i, err := range errs {
		parts[i] = err.Error()
	}
	if e.Metadata == nil {
		e.Metadata = map[string]interface{}{}
	}
	e.Metadata[UndecodableKey] = outbox.TruncateError(strings.Join(parts, "; "))
}
