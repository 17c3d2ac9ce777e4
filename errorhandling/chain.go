package errorhandling

import (
	"fmt"
	"unicode/utf8"
)

// MaxChainErrors bounds the errors ChainEnds visits in one error's tree.
const MaxChainErrors = 10_000

// ChainEnds reports whether err's Unwrap tree (its chain, and the
// branches of multi-errors) holds at most MaxChainErrors errors. An error
// whose Unwrap returns itself, or any cycle, holds infinitely many:
// errors.Is and errors.As would walk it for ever. An Unwrap method that
// panics panics here; callers that take errors from handlers call it
// under recover.
func ChainEnds(err error) bool {
	n := 0
	stack := []error{err}
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e == nil {
			continue
		}
		if n++; n > MaxChainErrors {
			return false
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			stack = append(stack, u.Unwrap())
		case interface{ Unwrap() []error }:
			stack = append(stack, u.Unwrap()...)
		}
	}
	return true
}

// EndlessChain returns err, unless its Unwrap tree does not end
// (ChainEnds): then a permanent error, reason HandlerException, that says
// so and holds err's text (its first 500 characters), not err. Code that
// runs a handler calls it on the handler's error before anything walks
// the error: errors.Is and errors.As, and every classifier, would loop
// for good on it, holding a worker busy and the message's lease renewed.
func EndlessChain(err error) error {
	if err == nil || ChainEnds(err) {
		return err
	}
	text := err.Error()
	if utf8.RuneCountInString(text) > 500 {
		text = string([]rune(text)[:500])
	}
	return WithReason(Permanent(fmt.Errorf("the handler's error has an Unwrap chain that does not end: %s", text)),
		ReasonHandlerException)
}
