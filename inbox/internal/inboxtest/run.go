package inboxtest

import (
	"context"
	"sync"
)

// Go runs fn in the background until the test ends, and fails the test
// when fn returns an error.
func (e *Env) Go(what string, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(e.Ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(ctx); err != nil {
			e.T.Errorf("%s: %v", what, err)
		}
	}()
	e.T.Cleanup(func() {
		cancel()
		<-done
	})
}

// Start runs fn in the background until stop, which waits for fn to
// return and fails the test when it returned an error: for a test that
// stops the code under test and goes on. A test that ends first stops it
// too.
func (e *Env) Start(what string, fn func(ctx context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(e.Ctx)
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	var err error
	wait := func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	e.T.Cleanup(func() { _ = wait() })
	return func() {
		e.T.Helper()
		if err := wait(); err != nil {
			e.T.Fatalf("%s: %v", what, err)
		}
	}
}
