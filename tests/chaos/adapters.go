package chaos

import (
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/lib/pq"

	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// adapter is one driver's pool and backend.
type adapter struct {
	name, app string
	db        *sql.DB
	b         *syncguard.Backend
	bound     time.Duration // longest an operation may take before it counts as a hang
	// attemptGrace is how long an operation may run past its context's
	// deadline: pgx stops at once; lib/pq keeps reading until the
	// DeadlineDialer's read timeout.
	attemptGrace time.Duration
}

func (r *runner) openAdapters(suffix string) error {
	o := r.opts
	base := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", r.proxy.Port())
	// lib/pq: lock_timeout below statement_timeout, so a lock storm ends
	// with 55P03; reads and writes bounded by the DeadlineDialer.
	pqApp := "chaos-pq-" + suffix
	conn, err := pq.NewConnector(base + "&application_name=" + pqApp + "&statement_timeout=1500&lock_timeout=300")
	if err != nil {
		return err
	}
	conn.Dialer(sgpq.DeadlineDialer{ReadTimeout: o.PQReadTimeout,
		KeepAlive: net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}, UserTimeout: 5 * time.Second})
	pqDB := sql.OpenDB(conn)
	// pgx: statement_timeout only, so a lock storm ends with 57014.
	pgxApp := "chaos-pgx-" + suffix
	pgxDB, err := sql.Open("pgx", base+"&application_name="+pgxApp+"&statement_timeout=600")
	if err != nil {
		pqDB.Close()
		return err
	}
	for _, a := range []*adapter{
		{name: "pq", app: pqApp, db: pqDB, bound: o.PQReadTimeout + o.OpTimeout + time.Second, attemptGrace: o.PQReadTimeout + time.Second},
		{name: "pgx", app: pgxApp, db: pgxDB, bound: o.OpTimeout + time.Second, attemptGrace: 500 * time.Millisecond},
	} {
		a.db.SetMaxOpenConns(o.MaxOpenConns)
		a.db.SetMaxIdleConns(o.MaxOpenConns)
		c := r.cfg
		b, err := syncguard.New(a.db, &c)
		if err != nil {
			return err
		}
		a.b = b
		r.adapt = append(r.adapt, a)
	}
	return nil
}

// note records an operation's outcome. err must come from syncguard.
func (r *runner) note(a *adapter, worker, key, op string, start time.Time, dur time.Duration, outcome string, err error, bound time.Duration) {
	if err != nil {
		outcome = "error " + string(syncguard.CodeOf(err))
	}
	if key != "" && !r.opts.NoEventLog {
		r.hist.Event(key, history.Event{At: start, Dur: dur, Worker: worker, Op: op, Outcome: outcome})
	}
	if !r.running.Load() {
		return
	}
	r.mu.Lock()
	kind, _, _ := strings.Cut(outcome, " fence=")
	r.ops[a.name+" "+op+" "+kind]++
	if dur > r.maxLat[a.name+" "+op] {
		r.maxLat[a.name+" "+op] = dur
	}
	if err == nil && len(r.opts.Schedule) > 0 {
		// Only the recovery after a fault needs them; a fault-free soak
		// would grow this list with every operation.
		r.successes[a.name] = append(r.successes[a.name], [2]time.Time{start, start.Add(dur)})
	}
	r.mu.Unlock()
	if dur > bound+schedulingSlack {
		r.violate(history.Violation{Rule: "a caller on a broken or half-open connection is released within its bound", Key: key,
			Detail: fmt.Sprintf("%s %s by %s took %v (bound %v plus %v for a loaded machine), ended with %s", a.name, op, worker, dur.Round(time.Millisecond), bound, schedulingSlack, outcome)})
	}
	if err != nil {
		r.checkErr(a, worker, op, err)
	}
}

// checkErr enforces the error contract under transient faults: every error
// is a *syncguard.Error with a code, and a retryable one.
func (r *runner) checkErr(a *adapter, worker, op string, err error) {
	var se *syncguard.Error
	if !errors.As(err, &se) || se.Code == "" {
		r.violate(history.Violation{Rule: "every error is a *syncguard.Error with a code",
			Detail: fmt.Sprintf("%s %s by %s: %T %v", a.name, op, worker, err, err)})
		return
	}
	r.mu.Lock()
	r.errs[fmt.Sprintf("%s %s %s", a.name, se.Code, se.SQLState)]++
	r.mu.Unlock()
	if !se.Retryable() {
		r.violate(history.Violation{Rule: "errors caused by transient faults are retryable (ServiceUnavailable, NetworkTimeout, RateLimited)",
			Detail: fmt.Sprintf("%s %s by %s: code %s: %v", a.name, op, worker, se.Code, err)})
	}
}

var _ = sgpq.Dialect // registers lib/pq's dialect
