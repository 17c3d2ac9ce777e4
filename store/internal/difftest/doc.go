// Package difftest holds the differential test of the stores: a seeded,
// randomised sequence of operations (enqueue, claims, outcomes, stream
// releases, dead-letter replays, clock moves) driven against store/sqlite
// and store/postgres at once, under one fake clock, checking after every
// step that both hold the same messages in the same states and that every
// claim obeys the claim rules of package store. It has no code of its own
// outside its test.
//
//	go test ./store/internal/difftest                          # default seeds
//	BACKSTOP_DIFF_SEED=42 BACKSTOP_DIFF_STEPS=5000 go test ./store/internal/difftest -run Differential -v
package difftest
