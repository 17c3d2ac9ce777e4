package inbox

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The inbox's Prometheus metrics, registered on Config.Metrics, in the
// namespace "backstop" and subsystem "inbox":
//
//	backstop_inbox_received_total{inbox,source}    counter  messages stored for their handlers
//	backstop_inbox_duplicates_total{inbox,source}  counter  redeliveries recognised and dropped
//	backstop_inbox_rejected_total{inbox,source}    counter  messages refused as invalid (ErrInvalid), or unsigned (http)
//	backstop_inbox_reused_ids_total{inbox,source}  counter  messages refused for an id received before for another
//	                                                        message (ErrIDReused; counted as rejected too)
//	backstop_inbox_swept_total{inbox}              counter  de-duplication records deleted by sweeps
//	backstop_inbox_no_handler_total{inbox}         counter  messages given back for want of a handler of their
//	                                                        type here, left to another instance (Config.NoHandlerWait)
//
// A message whose Received.Source is not a valid one (see MaxSourceLen) is
// counted as rejected under the source "invalid".
//
// The handlers' outcomes are the relay's metrics under the destination
// "inbox:<name>" (Config.Relay.Metrics).
type metrics struct {
	recv, dups, rej, reused *prometheus.CounterVec
	sweep, noHdlr           prometheus.Counter
	name                    string
}

func newMetrics(reg prometheus.Registerer, name string) (*metrics, error) {
	vec := func(metric, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "backstop", Subsystem: "inbox", Name: metric, Help: help}, labels)
	}
	m := &metrics{
		recv: vec("received_total", "Messages received and stored for their handlers.", "inbox", "source"),
		dups: vec("duplicates_total", "Messages received again within the de-duplication window, acknowledged and dropped.", "inbox", "source"),
		rej:  vec("rejected_total", "Messages refused as invalid: they cannot be stored.", "inbox", "source"),
		reused: vec("reused_ids_total", "Messages refused for an id received before for another message (another type or payload).",
			"inbox", "source"),
		name: name,
	}
	swept := vec("swept_total", "De-duplication records deleted by sweeps.", "inbox")
	noHandler := vec("no_handler_total", "Messages given back for want of a handler of their type here, left to another instance.", "inbox")
	if reg != nil {
		for _, c := range []**prometheus.CounterVec{&m.recv, &m.dups, &m.rej, &m.reused, &swept, &noHandler} {
			if err := reg.Register(*c); err != nil {
				// Another inbox registered it: share it.
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, err
				}
				existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
				if !ok {
					return nil, err
				}
				*c = existing
			}
		}
	}
	m.sweep = swept.WithLabelValues(name)
	m.noHdlr = noHandler.WithLabelValues(name)
	return m, nil
}

func (m *metrics) received(source string)  { m.recv.WithLabelValues(m.name, source).Inc() }
func (m *metrics) duplicate(source string) { m.dups.WithLabelValues(m.name, source).Inc() }
func (m *metrics) rejected(source string)  { m.rej.WithLabelValues(m.name, source).Inc() }
func (m *metrics) reusedID(source string)  { m.reused.WithLabelValues(m.name, source).Inc() }
func (m *metrics) swept(n int)             { m.sweep.Add(float64(n)) }
func (m *metrics) noHandler()              { m.noHdlr.Inc() }
