package postgres

import "strings"

// lifecycleStatements are the statements of the dead-letter lifecycle and
// of quarantine, with the store's names filled in.
type lifecycleStatements struct {
	resolveDelivered string
}

func newLifecycleStatements(n names) lifecycleStatements {
	r := strings.NewReplacer("{o}", n.outbox, "{d}", n.deadLetters, "{now}", nowExpr)
	return lifecycleStatements{
		resolveDelivered: r.Replace(resolveDeliveredSQL),
	}
}
