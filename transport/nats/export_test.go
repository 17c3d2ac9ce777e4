package natstransport

// CloseConnection closes t's connection under it, as the client does for
// good after a credential is refused twice in a row or the server answers
// with -ERR.
func CloseConnection(t *Transport) {
	t.mu.Lock()
	nc := t.nc
	t.mu.Unlock()
	nc.Close()
}
