package errorhandling_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
)

// selfish is an error whose Unwrap returns itself.
type selfish struct{}

func (*selfish) Error() string   { return "selfish" }
func (e *selfish) Unwrap() error { return e }

func TestChainEnds(t *testing.T) {
	wide := make([]error, errorhandling.MaxChainErrors)
	for i := range wide {
		wide[i] = errors.New("x")
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, true},
		{"plain", errors.New("x"), true},
		{"wrapped", fmt.Errorf("a: %w", fmt.Errorf("b: %w", errors.New("c"))), true},
		{"joined", errors.Join(errors.New("a"), nil, errors.New("b")), true},
		{"unwrap returns itself", &selfish{}, false},
		{"a cycle below a wrapper", fmt.Errorf("outer: %w", &selfish{}), false},
		{"a tree over the bound", errors.Join(wide...), false},
	} {
		if got := errorhandling.ChainEnds(c.err); got != c.want {
			t.Errorf("%s: ChainEnds = %v, want %v", c.name, got, c.want)
		}
	}
}
