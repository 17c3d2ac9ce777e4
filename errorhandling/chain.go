package errorhandling

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
