package tracker

import "github.com/backstophq/backstop/errorhandling"

// Blamer tracks a service and the processes run on it separately, and
// charges each fault to exactly one of them (seed 004, "Blame").
//
// A service is what is called: a destination. A process is one operation
// of that service on one input: a message sent to that destination. A
// parameter has no tracker of its own, since the same message may succeed
// at one destination and fail at another; the Blamer keys each parameter
// tracker by the pair (service, parameter).
//
// A fault blamed on the service (errorhandling.BlameDestination, also the
// rule when blame is unclear) counts against the service only; a fault
// blamed on the message (errorhandling.BlameMessage) counts against the
// process only. So the service is not told of every completion: a process
// fault neither faults nor heals the service.
//
// A Blamer is safe for concurrent use.
type Blamer struct {
	services  *Registry
	processes *Registry
}

// NewBlamer returns a Blamer keeping service trackers in services and
// process trackers in processes. A nil registry means a new one with the
// zero RegistryConfig. Registries may be shared between Blamers; the
// processes registry should not be shared with anything else.
func NewBlamer(services, processes *Registry) *Blamer {
	if services == nil {
		services = NewRegistry(RegistryConfig{})
	}
	if processes == nil {
		processes = NewRegistry(RegistryConfig{})
	}
	return &Blamer{services: services, processes: processes}
}

// Services returns the registry of service trackers, keyed by service key.
func (b *Blamer) Services() *Registry { return b.services }

// Processes returns the registry of process trackers. Its keys join the
// service key and the parameter key; use Parameter to reach one.
func (b *Blamer) Processes() *Registry { return b.processes }

// Service returns the tracker of the service serviceKey.
func (b *Blamer) Service(serviceKey string) *Tracker {
	return b.services.Get(serviceKey)
}

// Parameter returns the tracker of the process that runs paramKey on the
// service serviceKey, making it if need be. It is named serviceKey + "/" +
// paramKey, prefixed like any tracker of the processes registry.
func (b *Blamer) Parameter(serviceKey, paramKey string) *Tracker {
	return b.processes.get(processKey(serviceKey, paramKey),
		b.processes.name(serviceKey+"/"+paramKey))
}

// TryProceed says whether the process may run now: only when neither the
// service nor the process is backing off. The token is the AND of their
// back-offs: it expires when both have. It makes no tracker for a process
// that has never failed, so healthy traffic does not fill the registry.
func (b *Blamer) TryProceed(serviceKey, paramKey string) (RetryToken, bool) {
	stok, sok := b.Service(serviceKey).TryProceed()
	p, found := b.processes.peek(processKey(serviceKey, paramKey))
	if !found {
		return stok, sok
	}
	ptok, pok := p.TryProceed()
	return stok.And(ptok), sok && pok
}

// Record charges one fault, classified as c, to exactly one tracker: the
// process's when c.Blame is errorhandling.BlameMessage, the service's
// otherwise. The back-off lasts at least c.RetryAfter.
//
// It returns when the process may be tried again: the AND of the service's
// and the process's back-offs. When c is not retryable (a permanent fault,
// or an unknown one by default) the returned token never expires, since
// the process must not be retried, though the tracker charged only counts
// an ordinary fault.
func (b *Blamer) Record(serviceKey, paramKey string, c errorhandling.Classification) RetryToken {
	var tok RetryToken
	if c.Blame == errorhandling.BlameMessage {
		tok = b.Parameter(serviceKey, paramKey).FaultRetryAfter(c.RetryAfter)
		tok = tok.And(b.Service(serviceKey).Token())
	} else {
		tok = b.Service(serviceKey).FaultRetryAfter(c.RetryAfter)
		if p, ok := b.processes.peek(processKey(serviceKey, paramKey)); ok {
			tok = tok.And(p.Token())
		}
	}
	if !c.Retryable {
		return tok.And(Never(nil))
	}
	return tok
}

// Succeed records that the process ran successfully: both the service and
// the process are healthy again. The process's tracker, having nothing left
// to remember, is forgotten.
func (b *Blamer) Succeed(serviceKey, paramKey string) {
	b.Service(serviceKey).Success()
	key := processKey(serviceKey, paramKey)
	if p, ok := b.processes.Lookup(key); ok {
		p.Success()
		b.processes.forgetHealthy(key)
	}
}

// processKey joins a service key and a parameter key unambiguously.
func processKey(serviceKey, paramKey string) string {
	return serviceKey + "\x00" + paramKey
}
