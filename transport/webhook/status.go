package webhook

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/backstophq/backstop/errorhandling"
)

// StatusOverride changes what some answers of one destination mean,
// before the built-in mapping (errorhandling's HTTP status table) applies.
// Use it for a destination whose statuses say something else than usual,
// such as one that answers 404 for an order it does not know (the
// message's fault, not a wrong route) or 409 while another request for
// the same order is in progress (worth trying again later). Overrides are
// tried in order and the first that covers the status decides.
type StatusOverride struct {
	// Status is the status or range the override applies to: "409", a
	// class such as "4xx", or an inclusive range such as "500-503". Every
	// status in it is between 100 and 999 and none is a 2xx. Required.
	Status string
	// Class is errorhandling.ClassTransient (retried later) or
	// errorhandling.ClassPermanent (dead-lettered). Required.
	Class errorhandling.Class
	// Blame is whom a failure is charged to: errorhandling.BlameDestination
	// (the zero value: the message keeps its attempts and the
	// destination's breaker counts the failure) or
	// errorhandling.BlameMessage (the message uses up an attempt).
	Blame errorhandling.Blame
}

// statusRule is a parsed StatusOverride.
type statusRule struct {
	lo, hi int
	class  errorhandling.Class
	blame  errorhandling.Blame
}

// parseOverrides checks every override and names the first bad one.
func parseOverrides(overrides []StatusOverride) ([]statusRule, error) {
	rules := make([]statusRule, 0, len(overrides))
	for i, o := range overrides {
		field := fmt.Sprintf("Config.StatusOverrides[%d]", i)
		lo, hi, err := parseStatusRange(o.Status)
		if err != nil {
			return nil, fmt.Errorf("%w: %s.Status: %w", ErrInvalidConfig, field, err)
		}
		if o.Class != errorhandling.ClassTransient && o.Class != errorhandling.ClassPermanent {
			return nil, fmt.Errorf("%w: %s.Class is %s; want transient or permanent", ErrInvalidConfig, field, o.Class)
		}
		if o.Blame != errorhandling.BlameDestination && o.Blame != errorhandling.BlameMessage {
			return nil, fmt.Errorf("%w: %s.Blame is %s; want destination or message", ErrInvalidConfig, field, o.Blame)
		}
		rules = append(rules, statusRule{lo: lo, hi: hi, class: o.Class, blame: o.Blame})
	}
	return rules, nil
}

// parseStatusRange reads "409", "4xx" or "500-503".
func parseStatusRange(s string) (lo, hi int, err error) {
	s = strings.TrimSpace(s)
	switch {
	case len(s) == 3 && strings.EqualFold(s[1:], "xx") && s[0] >= '1' && s[0] <= '9':
		lo = int(s[0]-'0') * 100
		hi = lo + 99
	case strings.Contains(s, "-"):
		a, b, _ := strings.Cut(s, "-")
		lo, err = parseStatus(a)
		if err == nil {
			hi, err = parseStatus(b)
		}
		if err == nil && lo > hi {
			err = fmt.Errorf("range %q runs backwards", s)
		}
	default:
		lo, err = parseStatus(s)
		hi = lo
	}
	if err != nil {
		return 0, 0, err
	}
	if lo <= 299 && hi >= 200 {
		return 0, 0, fmt.Errorf("%q covers a 2xx, which always means delivered", s)
	}
	return lo, hi, nil
}

// parseStatus reads one status code, 100 to 999.
func parseStatus(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 100 || n > 999 {
		return 0, fmt.Errorf("%q is not a status code, a class such as 4xx, or a range such as 500-503", s)
	}
	return n, nil
}

// matchStatus returns the first rule covering status.
func matchStatus(rules []statusRule, status int) (statusRule, bool) {
	for _, r := range rules {
		if status >= r.lo && status <= r.hi {
			return r, true
		}
	}
	return statusRule{}, false
}

// mark gives err the rule's class and blame.
func (r statusRule) mark(err error) error {
	if r.class == errorhandling.ClassPermanent {
		err = errorhandling.Permanent(err)
	} else {
		err = errorhandling.Transient(err)
	}
	return errorhandling.WithBlame(err, r.blame)
}
