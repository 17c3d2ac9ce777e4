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

func TestEndlessChain(t *testing.T) {
	plain := fmt.Errorf("a: %w", errors.New("b"))
	if got := errorhandling.EndlessChain(plain); got != plain {
		t.Fatalf("EndlessChain(an error whose chain ends) = %v, want the error itself", got)
	}
	if got := errorhandling.EndlessChain(nil); got != nil {
		t.Fatalf("EndlessChain(nil) = %v", got)
	}
	got := errorhandling.EndlessChain(fmt.Errorf("outer: %w", &selfish{}))
	if !errorhandling.ChainEnds(got) {
		t.Fatal("the error EndlessChain returns has an endless chain itself")
	}
	if c, ok := errorhandling.MarkedClass(got); !ok || c != errorhandling.ClassPermanent {
		t.Errorf("class %v (marked %v), want permanent", c, ok)
	}
	if r, ok := errorhandling.ReasonOf(got); !ok || r != errorhandling.ReasonHandlerException {
		t.Errorf("reason %v (set %v), want HandlerException", r, ok)
	}
	if want := "the handler's error has an Unwrap chain that does not end: outer: selfish"; got.Error() != want {
		t.Errorf("text %q, want %q", got.Error(), want)
	}
}
