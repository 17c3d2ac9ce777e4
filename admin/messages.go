package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// Message is an outbox message as the API shows it.
type Message struct {
	ID          string `json:"id"`
	Seq         int64  `json:"seq"`
	Destination string `json:"destination"`
	Stream      string `json:"stream"`
	Type        string `json:"type"`
	// Payload is a payload that is JSON, written as the request carries
	// it. Client sends it through encoding/json, which compacts it and
	// escapes "<", ">", "&", U+2028 and U+2029: PayloadBase64 keeps any
	// payload byte for byte.
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64,omitempty"`
	// PayloadOmitted is set on a listing asked for without payloads
	// (?payload=false).
	PayloadOmitted bool              `json:"payload_omitted,omitempty"`
	Headers        map[string]string `json:"headers"`
	Ordering       string            `json:"ordering"`
	Status         string            `json:"status"`
	Attempts       int               `json:"attempts"`
	FailureReason  string            `json:"failure_reason"`
	Error          string            `json:"error"`
	Fingerprint    string            `json:"fingerprint"`
	ScheduledFor   *time.Time        `json:"scheduled_for"`
	InstanceID     string            `json:"instance_id"`
	LeaseExpiry    *time.Time        `json:"lease_expiry"`
	CreatedAt      time.Time         `json:"created_at"`
	DeadLetteredAt *time.Time        `json:"dead_lettered_at"`
	// History is the operators' actions on the message, newest first
	// (GET /v1/messages/{id}).
	History []AuditRecord `json:"history,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// payloadFields shows a payload as JSON when it is JSON, else in base64.
// omitPayload reads a listing's payload parameter: "false" lists without
// payloads (a page that shows none need not carry a megabyte per item),
// "true" or nothing with them.
func omitPayload(w http.ResponseWriter, v string) (omit, ok bool) {
	switch v {
	case "", "true":
		return false, true
	case "false":
		return true, true
	}
	badField(w, "payload", "payload must be true or false")
	return false, false
}

func payloadFields(b []byte) (json.RawMessage, string) {
	if len(b) == 0 {
		return nil, ""
	}
	// JSON is UTF-8 (RFC 8259): a payload json.Valid takes with invalid
	// UTF-8 in a string would go out byte for byte, and make the answer
	// invalid JSON; it goes as base64 instead.
	if utf8.Valid(b) && json.Valid(b) {
		var buf bytes.Buffer
		if json.Compact(&buf, b) == nil {
			return buf.Bytes(), ""
		}
	}
	return nil, base64.StdEncoding.EncodeToString(b)
}

// withoutPayload is m shown without its payload (PayloadOmitted), as a
// listing asked for without payloads shows it.
func (m Message) withoutPayload() Message {
	m.Payload, m.PayloadBase64, m.PayloadOmitted = nil, "", true
	return m
}

func toMessage(m *outbox.Message) Message {
	out := Message{
		ID: m.ID.String(), Seq: m.Seq, Destination: m.Destination, Stream: m.Stream, Type: m.Type,
		Headers: m.Headers, Ordering: string(m.Ordering), Status: m.Status.String(), Attempts: m.Attempts,
		Error: m.Error, Fingerprint: m.Fingerprint, ScheduledFor: timePtr(m.ScheduledFor), InstanceID: m.InstanceID,
		LeaseExpiry: timePtr(m.LeaseExpiry), CreatedAt: m.CreatedAt, DeadLetteredAt: timePtr(m.DeadLetteredAt),
	}
	if m.FailureReason != 0 {
		out.FailureReason = m.FailureReason.String()
	}
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	out.Payload, out.PayloadBase64 = payloadFields(m.Payload)
	return out
}

// EnqueueRequest is the body of POST /v1/messages.
type EnqueueRequest struct {
	Destination string `json:"destination,omitempty"`
	Topic       string `json:"topic,omitempty"`
	Type        string `json:"type"`
	// Payload is a payload that is JSON, written as the request carries
	// it. Client sends it through encoding/json, which compacts it and
	// escapes "<", ">", "&", U+2028 and U+2029: PayloadBase64 keeps any
	// payload byte for byte.
	Payload        json.RawMessage   `json:"payload,omitempty"`
	PayloadBase64  string            `json:"payload_base64,omitempty"`
	Stream         string            `json:"stream,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	Ordering       string            `json:"ordering,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	ScheduledFor   *time.Time        `json:"scheduled_for,omitempty"`
}

// EnqueueResponse says what POST /v1/messages wrote: one id per
// destination (several when a topic fans out). Duplicate is true when the
// idempotency key was used before and nothing was written.
type EnqueueResponse struct {
	ID        string   `json:"id"`
	IDs       []string `json:"ids"`
	Duplicate bool     `json:"duplicate"`
}

// decode reads a JSON body strictly: unknown fields and trailing data are
// refused, naming the field.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	var read bytes.Buffer // what the decoder read: a whole value before it decodes one
	dec := json.NewDecoder(io.TeeReader(r.Body, &read))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && bytes.HasPrefix(bytes.TrimLeft(read.Bytes(), " \t\r\n"), []byte("null")) {
		// null decodes into a struct as nothing at all: a bulk action's
		// body of null was the empty filter, every entry
		err = &json.UnmarshalTypeError{Value: "null", Type: reflect.TypeOf(v)}
	}
	if err == nil {
		// More() is false on a stray ']' or '}', which Token reports
		var mbe *http.MaxBytesError
		switch _, terr := dec.Token(); {
		case errors.As(terr, &mbe):
			err = terr
		case terr != io.EOF:
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err == nil {
		if f, problem := memberProblem(read.Bytes(), rawMembers(v)); problem != "" {
			badField(w, f, strings.TrimSpace(f+" "+problem))
			return false
		}
		return true
	}
	var mbe *http.MaxBytesError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		problem(w, http.StatusRequestEntityTooLarge, "body too large", fmt.Sprintf("the request body is over %d bytes", mbe.Limit), "")
	case errors.As(err, &te) && te.Field == "":
		// the body itself: [], "x", 42
		badField(w, "", "the request body must be a JSON object")
	case errors.As(err, &te):
		f := apiField(v, te.Field)
		badField(w, f, fmt.Sprintf("%s must be a JSON %s", f, jsonKind(te.Type.Kind().String())))
	case errors.Is(err, io.EOF):
		badField(w, "", "the request needs a JSON body")
	case isTimeError(err):
		f := badTime(read.Bytes(), v)
		badField(w, f, strings.TrimSpace(f+" must be an RFC 3339 time, such as 2026-11-24T12:00:00Z"))
	default:
		msg := err.Error()
		if f, ok := cutUnknownField(msg); ok {
			badField(w, f, "unknown field "+f)
			return false
		}
		badField(w, "", "the body is not valid JSON: "+msg)
	}
	return false
}

// memberProblem looks at the members of the JSON object body, which
// decoded, for what encoding/json lets through changed, and names the
// first member so at fault, in the body's order, with the problem ("" and
// "" when none is):
//   - a member given twice, its name compared as encoding/json matches a
//     struct's fields (without regard to case): encoding/json keeps the
//     last, and {"dry_run":true,"dry_run":false} ran the action for real;
//   - text that is not UTF-8, or an escaped UTF-16 surrogate (\ud800 to
//     \udfff) that is not half of a pair: encoding/json takes it as
//     U+FFFD, so two idempotency keys or streams that differ only there
//     became one, and the second message was dropped as a duplicate of
//     the first. The members in raw are decoded as json.RawMessage, kept
//     byte for byte, and not looked at for it.
func memberProblem(body []byte, raw map[string]bool) (field, problem string) {
	const badText = "is not valid UTF-8 text (an invalid byte, or a lone surrogate escape such as \\ud800)"
	// Most bodies are valid: one pass over the whole, and no member's
	// text looked at.
	checkText := !validText(body)
	// unnamed is the answer when the body cannot be walked member by
	// member (it decoded, so it should).
	unnamed := func() (string, string) {
		if checkText {
			return "", badText
		}
		return "", ""
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return unnamed()
	}
	seen := map[string]bool{}
	for dec.More() {
		start := dec.InputOffset()
		key, err := dec.Token()
		if err != nil {
			return unnamed()
		}
		name, _ := key.(string)
		lower := strings.ToLower(name)
		if seen[lower] {
			return name, "is given more than once"
		}
		seen[lower] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return unnamed()
		}
		if checkText && !raw[lower] && !validText(body[start:dec.InputOffset()]) {
			return name, badText
		}
	}
	return "", ""
}

// apiField is field, the path of a member encoding/json reports, without
// the Go names of v's embedded structs it starts with: a bulk request's
// "status" was reported as "Filter.status".
func apiField(v any, field string) string {
	t, ok := structType(v)
	if !ok {
		return field
	}
	for _, f := range reflect.VisibleFields(t) {
		if f.Anonymous {
			field = strings.TrimPrefix(field, f.Name+".")
		}
	}
	return field
}

// rawMembers are the JSON names, in lower case (encoding/json matches
// them so), of the fields of the struct v points to that are
// json.RawMessage.
func rawMembers(v any) map[string]bool {
	t, ok := structType(v)
	if !ok {
		return nil
	}
	var out map[string]bool
	for _, f := range reflect.VisibleFields(t) {
		if f.Type != reflect.TypeOf(json.RawMessage(nil)) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[strings.ToLower(name)] = true
	}
	return out
}

// structType is the struct type v points to, if it points to one.
func structType(v any) (reflect.Type, bool) {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	return t.Elem(), true
}

// validText reports whether the JSON text b is UTF-8 and escapes no lone
// surrogate.
func validText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		i++ // in valid JSON a backslash only starts an escape, in a string
		if i >= len(b) || b[i] != 'u' {
			continue
		}
		r, ok := hex4(b, i+1)
		if !ok {
			continue
		}
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return false
		case r >= 0xD800 && r <= 0xDBFF:
			if i+2 >= len(b) || b[i+1] != '\\' || b[i+2] != 'u' {
				return false
			}
			if lo, ok := hex4(b, i+3); !ok || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 6
		}
	}
	return true
}

// hex4 reads the four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	r, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return rune(r), err == nil
}

// isTimeError says err came from decoding a time.Time, which reports no
// field: a bad layout, or not a JSON string.
func isTimeError(err error) bool {
	var pe *time.ParseError
	return errors.As(err, &pe) || strings.HasPrefix(err.Error(), "Time.UnmarshalJSON")
}

// badTime names the member of the JSON object body whose value a field of
// v of type time.Time or *time.Time cannot take ("" if none is found).
func badTime(body []byte, v any) string {
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil {
		return ""
	}
	return badTimeIn(reflect.TypeOf(v), members)
}

// badTimeIn is badTime over the fields of t (a struct, or a pointer to
// one), and of the structs it embeds, as encoding/json reads them.
func badTimeIn(t reflect.Type, members map[string]json.RawMessage) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	timeType := reflect.TypeFor[time.Time]()
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			if found := badTimeIn(f.Type, members); found != "" {
				return found
			}
			continue
		}
		if f.Type != timeType && f.Type != reflect.PointerTo(timeType) {
			continue
		}
		for key, raw := range members {
			if !strings.EqualFold(key, name) || string(raw) == "null" {
				continue
			}
			var tm time.Time
			if json.Unmarshal(raw, &tm) != nil {
				return name
			}
		}
	}
	return ""
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "string"
	case "map", "struct":
		return "object"
	case "slice", "array":
		return "array"
	case "bool":
		return "boolean"
	}
	return "number"
}

func cutUnknownField(msg string) (string, bool) {
	const p = `json: unknown field "`
	if len(msg) > len(p) && msg[:len(p)] == p {
		return msg[len(p) : len(msg)-1], true
	}
	return "", false
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) {
	var req EnqueueRequest
	if !decode(w, r, &req) {
		return
	}
	if req.IdempotencyKey != "" && store.CheckIdempotencyKey(req.IdempotencyKey) != nil {
		badField(w, "idempotency_key", fmt.Sprintf("idempotency_key is at most %d bytes", store.MaxIdempotencyKeyLen))
		return
	}
	if strings.HasPrefix(req.IdempotencyKey, store.FanOutKeyPrefix) {
		badField(w, "idempotency_key", "idempotency keys beginning with "+store.FanOutKeyPrefix+" are reserved for the topics' fan-out")
		return
	}
	if !textFields(w, [2]string{"idempotency_key", req.IdempotencyKey}, [2]string{"topic", req.Topic}) {
		return // PostgreSQL's text columns hold no NUL: a 500 before
	}
	dests, ok := s.destinationsOf(w, &req)
	if !ok {
		return
	}
	var payload []byte
	switch {
	case len(req.Payload) > 0 && req.PayloadBase64 != "":
		badField(w, "payload_base64", "give payload or payload_base64, not both")
		return
	case req.PayloadBase64 != "":
		b, err := base64.StdEncoding.DecodeString(req.PayloadBase64)
		if err != nil {
			badField(w, "payload_base64", "payload_base64 is not standard base64")
			return
		}
		payload = b
	case len(req.Payload) > 0:
		payload = req.Payload
	}
	var msgs []*outbox.Message
	for _, d := range dests {
		m := &outbox.Message{Destination: d, Type: req.Type, Payload: payload, Stream: req.Stream,
			Headers: req.Headers, Ordering: outbox.Ordering(req.Ordering)}
		if req.ScheduledFor != nil {
			m.ScheduledFor = *req.ScheduledFor
		}
		if err := m.Validate(); err != nil {
			var fe *outbox.FieldError
			if errors.As(err, &fe) {
				badField(w, fe.Field, err.Error())
			} else {
				badField(w, "", err.Error())
			}
			return
		}
		if err := m.Ordering.Validate(); err != nil {
			badField(w, "ordering", "ordering must be strict, release or none")
			return
		}
		msgs = append(msgs, m)
	}
	// A W3C traceparent on the request joins the delivery to the
	// caller's trace; an invalid one is ignored.
	ctx := outbox.ContextWithTraceParent(r.Context(), r.Header.Get("Traceparent"))
	outbox.AttachTraceParent(ctx, msgs...)
	var ids []uuid.UUID
	created := true
	var err error
	if req.IdempotencyKey != "" {
		ids, created, err = s.adm.EnqueueIdempotent(r.Context(), req.IdempotencyKey, msgs...)
	} else {
		err = s.st.Enqueue(r.Context(), msgs...)
		for _, m := range msgs {
			ids = append(ids, m.ID)
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	resp := EnqueueResponse{IDs: make([]string, len(ids)), Duplicate: !created}
	for i, id := range ids {
		resp.IDs[i] = id.String()
	}
	if len(ids) > 0 {
		resp.ID = resp.IDs[0]
	}
	status := http.StatusAccepted
	if !created {
		status = http.StatusOK
	}
	writeJSON(w, status, resp)
}

// destinationsOf resolves the request's destination or topic.
func (s *Server) destinationsOf(w http.ResponseWriter, req *EnqueueRequest) ([]string, bool) {
	switch {
	case req.Destination != "" && req.Topic != "":
		badField(w, "topic", "give destination or topic, not both")
	case req.Destination == "" && req.Topic == "":
		badField(w, "destination", "destination (or topic) is required")
	case req.Topic != "":
		var to []string
		if s.cfg.Route != nil {
			to = s.cfg.Route(req.Topic)
		}
		if s.cfg.Route == nil {
			problem(w, http.StatusUnprocessableEntity, "no route",
				fmt.Sprintf("topic %q: this server has no routes (a topic goes through serve's routes; with --db there is no configuration, name a destination)", req.Topic), "topic")
			return nil, false
		}
		if len(to) == 0 {
			problem(w, http.StatusUnprocessableEntity, "no route", fmt.Sprintf("no route matches topic %q", req.Topic), "topic")
			return nil, false
		}
		return to, true
	case s.known != nil && !s.known[req.Destination]:
		problem(w, http.StatusUnprocessableEntity, "unknown destination",
			fmt.Sprintf("destination %q is not configured", req.Destination), "destination")
	default:
		return []string{req.Destination}, true
	}
	return nil, false
}

func (s *Server) listMessages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !knownParams(w, q, "destination", "stream", "type", "state", "limit", "cursor", "payload") {
		return
	}
	f := store.MessageFilter{Destination: q.Get("destination"), Stream: q.Get("stream"), Type: q.Get("type"),
		State: store.MessageState(q.Get("state"))}
	if !textFields(w, [2]string{"destination", f.Destination}, [2]string{"stream", f.Stream}, [2]string{"type", f.Type}) {
		return
	}
	switch f.State {
	case "", store.StateReady, store.StateRetrying, store.StateLeased, store.StateDeadLettered, store.StateDelivered:
	default:
		badField(w, "state", "state must be ready, retrying, leased, dead_lettered or delivered")
		return
	}
	limit, ok := limitParam(w, q.Get("limit"))
	if !ok {
		return
	}
	f.Limit = limit
	if f.OmitPayload, ok = omitPayload(w, q.Get("payload")); !ok {
		return
	}
	if c := q.Get("cursor"); c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil || n < 0 {
			badField(w, "cursor", "cursor must be a next_cursor returned by this API")
			return
		}
		f.AfterSeq = n
	}
	msgs, err := s.adm.ListMessages(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := List[Message]{Items: make([]Message, len(msgs))}
	for i, m := range msgs {
		out.Items[i] = toMessage(m)
		out.Items[i].PayloadOmitted = f.OmitPayload
	}
	if len(msgs) == limit {
		out.NextCursor = strconv.FormatInt(msgs[len(msgs)-1].Seq, 10)
	}
	writeJSON(w, http.StatusOK, out)
}

func limitParam(w http.ResponseWriter, v string) (int, bool) {
	if v == "" {
		return 100, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		badField(w, "limit", "limit must be a whole number from 1 to 1000")
		return 0, false
	}
	return n, true
}

func messageID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		badField(w, "id", "the message id must be a UUID")
		return uuid.Nil, false
	}
	return id, true
}

func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) {
	id, ok := messageID(w, r)
	if !ok {
		return
	}
	m, err := s.st.Get(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := toMessage(m)
	recs, err := s.adm.AuditLog(r.Context(), store.AuditFilter{Target: id.String()})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out.History = toAudit(recs)
	writeJSON(w, http.StatusOK, out)
}

// ActionRequest is the optional body of an action: the operator's notes,
// and for dead-letter the reason.
type ActionRequest struct {
	Notes  string `json:"notes,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// optionalBody reads an ActionRequest when there is a body; an empty
// one (Content-Length 0, or chunked with no bytes) is no body.
func optionalBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.ContentLength == 0 {
		return true
	}
	br := bufio.NewReader(r.Body)
	if _, err := br.Peek(1); err == io.EOF {
		return true
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{br, r.Body}
	return decode(w, r, v)
}

func (s *Server) messageAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := messageID(w, r)
		if !ok {
			return
		}
		var req ActionRequest
		if !optionalBody(w, r, &req) {
			return
		}
		ctx := r.Context()
		var err error
		if action == "retry_now" || action == "reset" {
			// The stores leave a dead-lettered message as it is (its
			// pending entry holds it): a 200 said it was retried.
			var m *outbox.Message
			if m, err = s.st.Get(ctx, id); err == nil && !m.DeadLetteredAt.IsZero() {
				err = store.ErrDeadLettered
			}
			if err != nil {
				s.fail(w, r, err)
				return
			}
		}
		switch action {
		case "retry_now":
			err = s.st.RetryNow(ctx, id)
		case "reset":
			err = s.st.ResetAttempts(ctx, id)
		case "cancel":
			err = s.adm.Cancel(ctx, id)
		case "dead_letter":
			reason := req.Reason
			if reason == "" {
				reason = "dead-lettered by " + actor(ctx)
			}
			err = s.st.DeadLetter(ctx, id, reason)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		rec := s.record(r, action, id.String(), "", 1, req.Notes)
		writeJSON(w, http.StatusOK, ActionResult{Action: action, Target: id.String(), Count: 1, AuditID: rec})
	}
}

// ActionResult says what an action did.
type ActionResult struct {
	Action  string `json:"action"`
	Target  string `json:"target"`
	Count   int    `json:"count"`
	AuditID int64  `json:"audit_id"`
}

// record writes the audit record of an action; a failure to record is
// logged, the action having been done.
//
// The record is written even when the client has gone (an operator's
// Ctrl-C, a proxy's timeout): what was done is done, and a bulk action
// cut short by its request's end had its first pages applied with no
// record of them. Its context keeps the request's values, not its end,
// and is bounded by auditTimeout. It returns 0 when the record could not
// be written (logged).
func (s *Server) record(r *http.Request, action, target, filter string, count int, notes string) int64 {
	s.statsCache.forget()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
	defer cancel()
	rec := &store.AuditRecord{Actor: actor(ctx), Action: action, Target: target, Filter: filter, Count: count, Notes: notes}
	if err := s.adm.Audit(ctx, rec); err != nil {
		s.cfg.Logger.Error("admin API: audit record not written", "action", action, "target", target, "count", count, "err", err)
		return 0
	}
	return rec.ID
}

// auditTimeout bounds the writing of an audit record once its request has
// ended.
const auditTimeout = 10 * time.Second
