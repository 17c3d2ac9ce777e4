package relay

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport"
)

func TestNewRejectsBadConfigNamingTheField(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ok := transport.Func(nil)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no destinations", Config{}, "relay: Destinations is empty"},
		{"nil transport", Config{Destinations: map[string]Destination{"orders": {}}}, `relay: Destinations["orders"].Transport is nil`},
		{"empty name", Config{Destinations: map[string]Destination{"": {Transport: ok}}}, "relay: Destinations has an empty name"},
		{"negative workers", Config{Destinations: map[string]Destination{"a": {Transport: ok}}, Workers: -1}, "relay: Workers must be from 0 to 10000"},
		// started at once, two billion took the machine's memory
		{"too many workers", Config{Destinations: map[string]Destination{"a": {Transport: ok}}, Workers: 2_000_000_000}, "relay: Workers must be from 0 to 10000"},
		{"max batch below batch", Config{Destinations: map[string]Destination{"a": {Transport: ok}}, BatchSize: 100, MaxBatchSize: 50}, "relay: MaxBatchSize must not be less than BatchSize (100), got 50"},
		{"negative prefetch bytes", Config{Destinations: map[string]Destination{"a": {Transport: ok}}, PrefetchBytes: -1}, "relay: PrefetchBytes must not be negative"},
		{"busy poll", Config{Destinations: map[string]Destination{"a": {Transport: ok}}, PollInterval: time.Millisecond}, "relay: PollInterval must be at least 10ms"},
		{"max below poll", Config{Destinations: map[string]Destination{"a": {Transport: ok}}, PollInterval: time.Minute, MaxPollInterval: time.Second}, "relay: MaxPollInterval must not be less than PollInterval"},
		{"silent relay", Config{Destinations: map[string]Destination{"a": {Transport: ok}}, MaxPollInterval: time.Minute}, "relay: MaxPollInterval must be less than half the store's InstanceTimeout (1m0s)"},
		{"negative timeout", Config{Destinations: map[string]Destination{"a": {Transport: ok, Timeout: -time.Second}}}, `relay: Destinations["a"].Timeout must not be negative`},
		{"negative concurrency", Config{Destinations: map[string]Destination{"a": {Transport: ok, Concurrency: -2}}}, `relay: Destinations["a"].Concurrency must not be negative`},
		{"bad breaker", Config{Destinations: map[string]Destination{"a": {Transport: ok, Breaker: &circuitbreaker.Config{MaxFailures: -1}}}}, `relay: Destinations["a"].Breaker: circuitbreaker: Config.MaxFailures`},
		{"bad policy", Config{Destinations: map[string]Destination{"a": {Transport: ok}}, UnknownDestination: 7}, "relay: UnknownDestination is not a known policy"},
		{"bad store config", Config{Destinations: map[string]Destination{"a": {Transport: ok}}, Store: &store.Config{DefaultPolicy: store.Policy{Ordering: "sideways"}}}, "relay: Store: store: DefaultPolicy.Ordering"},
		{"policy for a destination not delivered", Config{Destinations: map[string]Destination{"billing": {Transport: ok}}, Store: &store.Config{Policies: map[string]store.Policy{"biling": {MaxAttempts: 3}}}}, `relay: Store.Policies["biling"] is a policy for a destination this relay does not deliver`},
	} {
		_, err := New(e.s, tc.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error starting %q", tc.name, err, tc.want)
		}
	}
	if _, err := New(nil, Config{}); err == nil {
		t.Error("New(nil store) succeeded")
	}
}

// A store shared with other relays may carry their policies when the
// relay is told so.
func TestForeignPoliciesAllowedWhenSaid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := Config{
		Destinations:         map[string]Destination{"billing": {Transport: transport.Func(nil)}},
		Store:                &store.Config{Policies: map[string]store.Policy{"inbox:orders": {MaxAttempts: 3}, "billing": {MaxAttempts: 2}}},
		AllowForeignPolicies: true,
	}
	if _, err := New(e.s, cfg); err != nil {
		t.Fatalf("New with AllowForeignPolicies: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	user := retry.NewConfig(5, nil)
	br := &circuitbreaker.Config{MaxFailures: 2}
	r, err := New(e.s, Config{Destinations: map[string]Destination{"a": {Transport: transport.Func(nil), InProcess: user, Breaker: br}}})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Config()
	d := c.Destinations["a"]
	switch {
	case c.Instance.ID == "" || c.Instance.PID == 0 || c.Instance.StartedAt.IsZero():
		t.Errorf("instance = %+v", c.Instance)
	case c.Workers != DefaultWorkers || c.BatchSize != DefaultBatchFactor*DefaultWorkers ||
		c.MaxBatchSize != DefaultMaxBatchSize || c.PrefetchBytes != DefaultPrefetchBytes:
		t.Errorf("workers %d, batch %d to %d, prefetch bytes %d", c.Workers, c.BatchSize, c.MaxBatchSize, c.PrefetchBytes)
	case c.PollInterval != time.Second || c.MaxPollInterval != 5*time.Second || c.ShutdownTimeout != 30*time.Second:
		t.Errorf("intervals %s %s %s", c.PollInterval, c.MaxPollInterval, c.ShutdownTimeout)
	case c.LeaseDuration != 30*time.Second:
		t.Errorf("lease %s, want the store's", c.LeaseDuration)
	case c.Store.EffectiveOrdering(&outbox.Message{Destination: "a"}) != outbox.OrderingStrict:
		t.Errorf("store config not read from the store")
	case d.Timeout != DefaultTimeout || d.Concurrency != DefaultWorkers || d.InProcess.MaxAttempts != 5 || d.Breaker.MaxFailures != 2:
		t.Errorf("destination = %+v", d)
	case d.Breaker.Classifier != c.Classifier || d.Breaker.Name != "a":
		t.Errorf("breaker not given the relay's classifier and the destination's name")
	case user.Clock != nil || br.Classifier != nil:
		t.Errorf("New changed the caller's configs")
	}
	if got := r.Breaker("a"); got == nil || r.Breaker("b") != nil {
		t.Error("Breaker lookup")
	}
}

// A BatchSize set alone is held fixed; a MaxBatchSize set alone caps the
// starting size as well.
func TestBatchSizeDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		workers, batch, maxBatch int
		wantBatch, wantMax       int
	}{
		{0, 0, 0, 256, 4096},
		{0, 100, 0, 100, 100},
		{0, 0, 100, 100, 100},
		{0, 300, 2000, 300, 2000},
		{1000, 0, 0, 16000, 16000},
		{4, 0, 0, 64, 4096},
	} {
		r, err := New(e.s, Config{Destinations: map[string]Destination{"a": {Transport: transport.Func(nil)}},
			Workers: tc.workers, BatchSize: tc.batch, MaxBatchSize: tc.maxBatch})
		if err != nil {
			t.Fatal(err)
		}
		if c := r.Config(); c.BatchSize != tc.wantBatch || c.MaxBatchSize != tc.wantMax {
			t.Errorf("Workers %d BatchSize %d MaxBatchSize %d: got %d to %d, want %d to %d",
				tc.workers, tc.batch, tc.maxBatch, c.BatchSize, c.MaxBatchSize, tc.wantBatch, tc.wantMax)
		}
	}
}

func TestMetricsAreRegisteredAndCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good, bad := msg("orders", "a", 1), msg("orders", "b", 1)
	e.enqueue(good, bad)
	reg := prometheus.NewRegistry()
	cfg := e.config(map[string]Destination{"orders": {Transport: (&recorder{fn: failFirst(string(bad.Payload), errPermanent)}).transport()}})
	cfg.Metrics = reg
	rn := e.start(cfg)
	rn.settle()
	rn.readGauges() // the leader reads the store gauges on its beat, never on a scrape

	got := gather(t, reg)
	for name, want := range map[string]float64{
		`backstop_claimed_total`:                                                                                   2,
		`backstop_delivered_total{destination="orders"}`:                                                           1,
		`backstop_dead_lettered_total{destination="orders",reason="ValidationFailure"}`:                            1,
		`backstop_failed_total{blame="message",class="permanent",destination="orders",reason="ValidationFailure"}`: 1,
		`backstop_dlq_depth`:                                             1,
		`backstop_scheduled_backlog`:                                     0,
		`backstop_poison_candidates`:                                     0,
		`backstop_blocked_streams`:                                       0,
		`backstop_in_flight`:                                             0,
		`backstop_prefetch_target`:                                       DefaultBatchFactor * DefaultWorkers, // a fake clock: no rate measured
		`backstop_breaker_state{destination="orders"}`:                   0,
		`backstop_destination_paused{destination="orders"}`:              0,
		`backstop_queued{destination="orders"}`:                          0,
		`backstop_leader`:                                                1, // the only relay on its store leads
		`backstop_delivery_duration_seconds_count{destination="orders"}`: 2,
		`backstop_end_to_end_seconds_count{destination="orders"}`:        1,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if _, ok := got["backstop_claim_duration_seconds_count"]; !ok {
		t.Error("no claim duration")
	}
	if _, err := New(e.s, cfg); err == nil || !strings.HasPrefix(err.Error(), "relay: Metrics:") {
		t.Errorf("registering twice: %v", err)
	}
}

var errPermanent = errorhandling.WithHTTPStatus(errors.New("400 bad request"), 400)

// gather returns every sample of reg by its name and labels, as the text
// format writes them; histograms give their _count.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := ""
			if len(labels) > 0 {
				key = "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()+key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[mf.GetName()+key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_count"+key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}
