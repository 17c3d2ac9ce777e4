package errorhandling

import (
	"sync"
	"time"
)

// Classification is the verdict on one error.
type Classification struct {
	// Class is the fault class as classified; ClassUnknown when nothing
	// recognised the error.
	Class Class
	// Retryable says whether to retry: true for transient and recognised
	// faults, and for unknown ones when the classifier treats unknown as
	// transient.
	Retryable bool
	// Blame says who the fault is charged to.
	Blame Blame
	// Reason is the failure reason to record.
	Reason FailureReason
	// Code is a short name such as "timeout", "rate_limit",
	// "connection_refused", "unauthorized" or "http_422"; empty when none
	// applies.
	Code string
	// RetryAfter is the shortest wait before the next try that the error
	// asked for (a 429's Retry-After); zero when none.
	RetryAfter time.Duration
	// Rule names what decided the class: a user rule's Name, "marker" for
	// Permanent/Transient/Recognised, or a built-in rule such as
	// "http_status", "sqlstate", "context", "network", "json", "code",
	// "reason". Empty when nothing did.
	Rule string
	// Remedy fixes a recognised fault; nil otherwise.
	Remedy Remedy
}

// Rule is a user classification rule. Rules added with AddRule are tried in
// the order added, before every built-in rule; the first that matches
// decides the class, blame and (when non-zero) reason, code and remedy.
type Rule struct {
	// Name identifies the rule in Classification.Rule and in logs.
	Name string
	// Match reports whether the rule applies to err. It must be safe for
	// concurrent use.
	Match func(err error) bool
	// Class is the class the rule assigns. ClassUnknown is allowed and
	// means "leave it unknown" (the classifier's setting then applies).
	Class Class
	// Blame is whom to charge.
	Blame Blame
	// Reason is the failure reason; zero means the class's usual reason.
	Reason FailureReason
	// Code, when set, replaces the error's code.
	Code string
	// Remedy fixes the fault when Class is ClassRecognised.
	Remedy Remedy
}

// BuiltinRetryableCodes are the codes every new ErrorClassifier treats as
// retryable.
var BuiltinRetryableCodes = []string{
	"timeout", "connection_refused", "temporary", "rate_limit", "service_unavailable", "network",
}

// ErrorClassifier classifies errors. The zero value is not usable; call
// NewErrorClassifier. It is safe for concurrent use.
type ErrorClassifier struct {
	mu               sync.RWMutex
	retryable        map[string]struct{}
	rules            []Rule
	unknownTransient bool
}

// ClassifierOption configures an ErrorClassifier.
type ClassifierOption func(*ErrorClassifier)

// UnknownIsTransient makes the classifier treat errors nobody classified as
// transient (retried) instead of permanent.
func UnknownIsTransient() ClassifierOption {
	return func(c *ErrorClassifier) { c.unknownTransient = true }
}

// NewErrorClassifier returns a classifier with the built-in retryable codes
// and rules.
func NewErrorClassifier(opts ...ClassifierOption) *ErrorClassifier {
	c := &ErrorClassifier{retryable: make(map[string]struct{})}
	for _, code := range BuiltinRetryableCodes {
		c.retryable[code] = struct{}{}
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// IsRetryable reports whether code names a retryable error.
func (c *ErrorClassifier) IsRetryable(code string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.retryable[code]
	return ok
}

// AddRetryableError makes code retryable.
func (c *ErrorClassifier) AddRetryableError(code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.retryable[code] = struct{}{}
}

// userRetryable reports whether code was made retryable by
// AddRetryableError rather than being built in.
func (c *ErrorClassifier) userRetryable(code string) bool {
	for _, b := range BuiltinRetryableCodes {
		if b == code {
			return false
		}
	}
	return c.IsRetryable(code)
}

// AddRule adds a user rule. User rules take precedence over the built-in
// rules and over Permanent/Transient markers, in the order added.
func (c *ErrorClassifier) AddRule(r Rule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rules = append(c.rules, r)
}

// SetUnknownTransient sets whether unknown errors are retried.
func (c *ErrorClassifier) SetUnknownTransient(transient bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unknownTransient = transient
}

// UnknownTransient reports whether unknown errors are retried.
func (c *ErrorClassifier) UnknownTransient() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.unknownTransient
}

// Classify returns the verdict on err. A nil error has the zero
// Classification.
//
// The class is decided by the first of: a user rule; a Permanent, Transient
// or Recognised marker; then the built-in rules in this order: an explicit
// error code (WithCode) that IsRetryable; context errors; an HTTP status;
// a PostgreSQL SQLSTATE; network errors; JSON decoding errors; a failure
// reason attached with WithReason.
//
// HTTP statuses are sorted by who can fix them:
//
//	status                        class      blame        reason                code
//	401 403 404 405 407 410       transient  destination  DependencyFailure     unauthorized, forbidden, not_found,
//	421 426                                                                     method_not_allowed, proxy_auth_required,
//	                                                                            gone, misdirected_request, upgrade_required
//	408, 504                      transient  destination  TimeoutExceeded       timeout
//	423, 425, 429, other 5xx      transient  destination  TransportUnavailable  http_423, http_425, rate_limit, service_unavailable (503), http_5xx
//	3xx                           transient  destination  TransportUnavailable  http_3xx
//	413 with a Retry-After        transient  message      ValidationFailure     http_413
//	400 413 415 422, other 4xx    permanent  message      ValidationFailure     http_4xx
//
// A credential that stopped working or a route that is wrong refuses
// every message alike; the messages are fine and wait, with their attempts
// intact, while the destination's breaker is open. A 1xx or 2xx says
// nothing and is left to the later rules. Reason, blame and code attached with
// WithReason, WithBlame and WithCode always override what a rule says.
func (c *ErrorClassifier) Classify(err error) Classification {
	if err == nil {
		return Classification{}
	}
	c.mu.RLock()
	rules := c.rules
	unknownTransient := c.unknownTransient
	c.mu.RUnlock()

	v, decided := Classification{}, false
	for _, r := range rules {
		if r.Match != nil && r.Match(err) {
			v = Classification{Class: r.Class, Blame: r.Blame, Reason: r.Reason, Code: r.Code, Rule: r.Name, Remedy: r.Remedy}
			decided = true
			break
		}
	}
	if !decided {
		v, decided = classifyMarker(err)
	}
	if !decided {
		v, decided = c.classifyBuiltin(err)
	}
	if !decided {
		v = Classification{Class: ClassUnknown, Blame: BlameMessage}
	}
	c.finish(&v, err, unknownTransient)
	return v
}

// finish fills what the deciding rule left open and applies the explicit
// attachments, which always win.
func (c *ErrorClassifier) finish(v *Classification, err error, unknownTransient bool) {
	if v.Code == "" {
		v.Code = deriveCode(err)
	}
	if code, ok := CodeOf(err); ok {
		v.Code = code
	}
	// Blame first: the default reason depends on it.
	if b, ok := BlameOf(err); ok {
		v.Blame = b
	}
	if r, ok := ReasonOf(err); ok {
		v.Reason = r
	}
	if v.Reason == 0 {
		v.Reason = defaultReason(v.Class, v.Blame)
	}
	if d, ok := RetryAfterOf(err); ok {
		v.RetryAfter = d
	}
	if v.Class == ClassRecognised && v.Remedy == nil {
		if r, ok := findRecognised(err); ok {
			v.Remedy = r.Remedy
		}
	}
	switch v.Class {
	case ClassTransient, ClassRecognised:
		v.Retryable = true
	case ClassUnknown:
		v.Retryable = unknownTransient
	}
}

// defaultReason picks a reason when no rule or attachment named one.
func defaultReason(class Class, blame Blame) FailureReason {
	switch {
	case class == ClassUnknown:
		return ReasonUnknown
	case blame == BlameDestination:
		return ReasonTransportUnavailable
	case class == ClassPermanent:
		return ReasonValidationFailure
	}
	return ReasonHandlerException
}

// classifyMarker applies a Permanent, Transient or Recognised marker. A
// marked error's blame defaults to the destination for transient and
// recognised faults and to the message for permanent ones. finish picks up
// a recognised fault's remedy.
func classifyMarker(err error) (Classification, bool) {
	class, ok := MarkedClass(err)
	if !ok {
		return Classification{}, false
	}
	v := Classification{Class: class, Blame: BlameDestination, Rule: "marker"}
	if class == ClassPermanent {
		v.Blame = BlameMessage
	}
	return v, true
}

// Promote applies the bounded-remedy rule: a recognised fault whose remedy
// has been tried remediesTried times, maxRemedies or more, is no longer
// recognised and is returned as transient, without its remedy. Any other
// classification is returned as is. A maxRemedies <= 0 means
// DefaultMaxRemedies.
func Promote(v Classification, remediesTried, maxRemedies int) Classification {
	if maxRemedies <= 0 {
		maxRemedies = DefaultMaxRemedies
	}
	if v.Class == ClassRecognised && remediesTried >= maxRemedies {
		v.Class = ClassTransient
		v.Remedy = nil
		v.Retryable = true
	}
	return v
}

// DefaultMaxRemedies is how many times a recognised fault's remedy is tried
// before the fault is promoted to transient.
const DefaultMaxRemedies = 3
