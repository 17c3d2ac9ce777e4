package sqlite

// ReadStreamsIndexed makes every claim read its streams with
// readStreamIndexed alone, until the returned func is called: the
// conformance suite then covers the read that passes over parked messages,
// which a claim otherwise uses only past walkParkedCap of them.
func ReadStreamsIndexed() (restore func()) {
	old := walkParkedCap
	walkParkedCap = -1
	return func() { walkParkedCap = old }
}
