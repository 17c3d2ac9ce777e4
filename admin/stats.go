package admin

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
)

// Stats is the monitoring summary.
type Stats struct {
	RetryDistribution []AttemptsCount `json:"retry_distribution"`
	FailureReasons    []ReasonCount   `json:"failure_reasons"`
	ScheduledBacklog  Backlog         `json:"scheduled_backlog"`
	PoisonCandidates  []Message       `json:"poison_candidates"`
	DLQDepth          int             `json:"dlq_depth"`
	DLQOldestAgeSecs  float64         `json:"dlq_oldest_age_seconds"`
	BlockedStreams    int             `json:"blocked_streams"`
}

// AttemptsCount is a row of the retry distribution.
type AttemptsCount struct {
	Attempts int `json:"attempts"`
	Count    int `json:"count"`
}

// ReasonCount is a row of the failure reasons.
type ReasonCount struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// Backlog summarises the messages waiting for a later try.
type Backlog struct {
	Count  int        `json:"count"`
	Next   *time.Time `json:"next"`
	Latest *time.Time `json:"latest"`
}

// poisonMinAttempts is the attempts from which a failing message is a
// poison candidate in the stats.
const poisonMinAttempts = 3

// statsTTL is how long a computed Stats answers GET /v1/stats. Its
// queries read the outbox and the dead-letter queue whole (seconds each at
// a million rows), and every open dashboard asks every 2 s: computed per
// request, three dashboards starved delivery on both stores.
const statsTTL = 5 * time.Second

// statsTimeout bounds one computation of Stats, which no single request
// owns.
const statsTimeout = time.Minute

// statsCache shares one computation of Stats among the requests that come
// while it runs and for statsTTL after. An operator's action (forget)
// makes the next request compute again, not take a computation begun
// before the action.
type statsCache struct {
	mu  sync.Mutex
	gen uint64 // bumped by forget
	// The last computation that ended without error, of generation valGen.
	val    Stats
	at     time.Time
	valGen uint64
	// The computation under way, if any.
	run *statsRun
}

// statsRun is one computation of Stats.
type statsRun struct {
	gen  uint64
	done chan struct{} // closed when val and err are set
	val  Stats
	err  error
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	out, err := s.cachedStats(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// cachedStats returns the Stats computed less than statsTTL ago, or waits
// for a computation: the one under way, or one it starts. A computation
// goes on when the request that started it ends, for those waiting on it.
func (s *Server) cachedStats(ctx context.Context) (Stats, error) {
	c := &s.statsCache
	c.mu.Lock()
	if !c.at.IsZero() && c.valGen == c.gen && time.Since(c.at) < statsTTL {
		v := c.val
		c.mu.Unlock()
		return v, nil
	}
	run := c.run
	if run == nil || run.gen != c.gen {
		run = &statsRun{gen: c.gen, done: make(chan struct{})}
		c.run = run
		go func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statsTimeout)
			defer cancel()
			run.val, run.err = s.computeStats(cctx)
			c.mu.Lock()
			if run.err == nil && run.gen == c.gen {
				c.val, c.at, c.valGen = run.val, time.Now(), run.gen
			}
			if c.run == run {
				c.run = nil
			}
			c.mu.Unlock()
			close(run.done)
		}()
	}
	c.mu.Unlock()
	select {
	case <-run.done:
		return run.val, run.err
	case <-ctx.Done():
		return Stats{}, ctx.Err()
	}
}

// forget makes the next request compute Stats again: an operator's action
// (a replay, a release) shows in its answer.
func (c *statsCache) forget() {
	c.mu.Lock()
	c.gen++
	c.mu.Unlock()
}

// computeStats runs the monitoring queries.
func (s *Server) computeStats(ctx context.Context) (Stats, error) {
	var out Stats
	dist, err := s.st.RetryDistribution(ctx)
	if err == nil {
		out.RetryDistribution = make([]AttemptsCount, len(dist))
		for i, d := range dist {
			out.RetryDistribution[i] = AttemptsCount{d.Attempts, d.Count}
		}
		var reasons []store.ReasonCount
		reasons, err = s.st.FailureReasons(ctx)
		out.FailureReasons = make([]ReasonCount, len(reasons))
		for i, rc := range reasons {
			out.FailureReasons[i] = ReasonCount{rc.Reason.String(), rc.Count}
		}
	}
	if err == nil {
		var b store.Backlog
		b, err = s.st.ScheduledBacklog(ctx)
		out.ScheduledBacklog = Backlog{Count: b.Count, Next: timePtr(b.Next), Latest: timePtr(b.Latest)}
	}
	if err == nil {
		pc, e := s.st.PoisonCandidates(ctx, poisonMinAttempts)
		err = e
		out.PoisonCandidates = make([]Message, 0, len(pc))
		for _, m := range pc {
			// the store reads them without payloads
			out.PoisonCandidates = append(out.PoisonCandidates, toMessage(m).withoutPayload())
		}
	}
	if err == nil {
		out.DLQDepth, err = s.st.DLQ().Count(ctx)
	}
	if err == nil {
		var oldest []*dlq.Entry
		oldest, err = s.st.DLQ().List(ctx, &dlq.Filters{Status: dlq.StatusPending, Limit: 1})
		if len(oldest) == 1 {
			// The failure time is the store's clock's (the database's on
			// PostgreSQL): read against this host's, a database an hour
			// ahead made the age -3599 s, and an hour behind an hour too
			// old.
			var now time.Time
			now, err = s.adm.Now(ctx)
			out.DLQOldestAgeSecs = max(now.Sub(oldest[0].FailureTime).Seconds(), 0)
		}
	}
	if err == nil {
		out.BlockedStreams, err = s.st.BlockedStreams(ctx)
	}
	return out, err
}

// breakers lists the relay's breakers (Config.Breakers); a server with no
// relay of its own (the CLI with --db) lists the circuits the store keeps
// for the fleet instead: open or paused (a Retry-After) when they are, else
// closed, without the counts a relay keeps in memory. It listed nothing,
// even while the fleet held a circuit open.
func (s *Server) breakers(w http.ResponseWriter, r *http.Request) {
	out := List[Breaker]{Items: []Breaker{}}
	if s.cfg.Breakers != nil {
		out.Items = append(out.Items, s.cfg.Breakers()...)
	} else if fleet, ok := s.st.(store.Fleet); ok {
		circuits, err := fleet.Circuits(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		for _, c := range circuits {
			state := "closed"
			switch {
			case c.Open:
				state = "open"
			case c.Paused:
				state = "paused"
			}
			out.Items = append(out.Items, Breaker{Destination: c.Destination, State: state})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// AuditRecord is an operator's action.
type AuditRecord struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Target string    `json:"target"`
	Filter string    `json:"filter"`
	Count  int       `json:"count"`
	Notes  string    `json:"notes"`
}

func toAudit(recs []*store.AuditRecord) []AuditRecord {
	out := make([]AuditRecord, len(recs))
	for i, r := range recs {
		out[i] = AuditRecord{r.ID, r.At, r.Actor, r.Action, r.Target, r.Filter, r.Count, r.Notes}
	}
	return out
}

func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !knownParams(w, q, "target", "action", "limit", "cursor") {
		return
	}
	limit, ok := limitParam(w, q.Get("limit"))
	if !ok {
		return
	}
	f := store.AuditFilter{Target: q.Get("target"), Action: q.Get("action"), Limit: limit}
	if !textFields(w, [2]string{"target", f.Target}, [2]string{"action", f.Action}) {
		return
	}
	if c := q.Get("cursor"); c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil || n <= 0 {
			badField(w, "cursor", "cursor must be a next_cursor returned by this API")
			return
		}
		f.BeforeID = n
	}
	recs, err := s.adm.AuditLog(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := List[AuditRecord]{Items: toAudit(recs)}
	if len(recs) == limit {
		out.NextCursor = strconv.FormatInt(recs[len(recs)-1].ID, 10)
	}
	writeJSON(w, http.StatusOK, out)
}
