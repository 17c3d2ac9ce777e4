package circuitbreaker

import (
	"errors"
	"fmt"
)

// State is the state of a CircuitBreaker.
type State int

// The states of a CircuitBreaker. The zero value is StateClosed.
const (
	// StateClosed lets every call through.
	StateClosed State = iota
	// StateOpen rejects every call until the timeout has passed.
	StateOpen
	// StateHalfOpen lets a limited number of trial calls through.
	StateHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateOpen:
		return "open"
	case StateHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// ErrCircuitOpen is returned, itself and never wrapped, for every call the
// breaker rejects: all calls while it is open, and the calls beyond
// Config.HalfOpenMaxRequests while it is half-open. So both
// err == ErrCircuitOpen and errors.Is(err, ErrCircuitOpen) hold for every
// rejection. A rejected call was not run.
var ErrCircuitOpen = errors.New("circuitbreaker: circuit open, call rejected")

// The breaker's state and generation live in one word so that the closed
// path can read both with one atomic load. The generation goes up on every
// transition (and on Reset); an outcome reported for a call admitted in an
// older generation no longer moves the state machine.
const stateBits = 2

func packWord(gen uint64, s State) uint64 { return gen<<stateBits | uint64(s) }

func wordState(w uint64) State { return State(w & (1<<stateBits - 1)) }

func wordGen(w uint64) uint64 { return w >> stateBits }
