package conformance

import (
	"context"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

func init() {
	registerSQL("Errors/ConnectionRefusedIsServiceUnavailable", func(e *sqlEnv) {
		e.skipUnless(e.h.OpenRefused != nil, "OpenRefused")
		b := e.newBackend(e.h.OpenRefused(e.t), nil)
		ctx, cancel := context.WithTimeout(e.ctx, e.slow().scale(20*time.Second))
		defer cancel()
		for op, err := range allOps(ctx, b, e.key("refused"), rules.GenerateLockID(), time.Second) {
			if !errIs(err, syncguard.ErrServiceUnavailable) || !syncguard.CodeOf(err).Retryable() {
				e.t.Errorf("rule: a refused connection fails with ErrServiceUnavailable (retryable); %s got %v", op, err)
			}
		}
	})

	registerSQL("Errors/WrongPasswordIsAuthFailed", func(e *sqlEnv) {
		e.skipUnless(e.h.OpenWrongPassword != nil, "OpenWrongPassword")
		db := e.h.OpenWrongPassword(e.t) // may skip, with its own reason
		ctx, cancel := context.WithTimeout(e.ctx, e.slow().scale(20*time.Second))
		defer cancel()
		if err := db.PingContext(ctx); err == nil {
			// The server let the "wrong" password in (trust authentication,
			// or a role without a password, as on a server given by
			// SYNCGUARD_TEST_DSN): the harness cannot produce a rejected
			// login, so there is nothing to check.
			e.t.Skip("Harness.OpenWrongPassword's pool logged in: the server did not reject its credentials (trust authentication?), so this harness cannot produce a rejected login")
		}
		b := e.newBackend(db, nil)
		for op, err := range allOps(ctx, b, e.key("auth"), rules.GenerateLockID(), time.Second) {
			if !errIs(err, syncguard.ErrAuthFailed) || syncguard.CodeOf(err).Retryable() {
				e.t.Errorf("rule: rejected credentials fail with ErrAuthFailed (not retryable); %s got %v", op, err)
			}
		}
	})

	registerSQL("Errors/ServerStatementTimeoutIsNetworkTimeout", func(e *sqlEnv) {
		k := e.key("stmttimeout")
		e.holdFenceRow(k)
		tx := e.begin(e.db)
		e.txExec(tx, `SET LOCAL statement_timeout = '200ms'`)
		r, err := e.pb.WithTx(tx).Acquire(e.ctx, k, 30*time.Second)
		if r.OK || !errIs(err, syncguard.ErrNetworkTimeout) {
			e.t.Errorf("rule: a statement cancelled by the server's statement_timeout fails with ErrNetworkTimeout; got %+v, %v", r, err)
		}
		var se *syncguard.Error
		if asErr(err, &se) && se.SQLState != "57014" {
			e.t.Errorf("rule: the error carries the server's SQLSTATE; want 57014, got %q (%v)", se.SQLState, err)
		}
	})

	registerSQL("Errors/TerminatedBackendIsServiceUnavailableThenRecovers", func(e *sqlEnv) {
		k := e.key("terminate")
		unblock := e.holdFenceRow(k)
		db := e.h.Open(e.t)
		db.SetMaxOpenConns(1)
		b := e.newBackend(db, nil)
		type res struct {
			r   syncguard.AcquireResult
			err error
		}
		ch := make(chan res, 1)
		returned := make(chan struct{})
		go func() {
			r, err := b.Acquire(e.ctx, k, 30*time.Second)
			ch <- res{r, err}
			close(returned)
		}()
		// database/sql re-runs a statement whose driver reports
		// driver.ErrBadConn (lib/pq does so after a FATAL error) on a new
		// connection, a bounded number of times; each re-run waits again
		// and is terminated again.
		var (
			got        res
			terminated []int
		)
		for done := false; !done; {
			pid := e.waitLockWaiter(e.cfg.TableName, returned, terminated...)
			if pid == 0 {
				select {
				case got = <-ch:
					done = true
					continue
				default:
				}
				unblock()
				got = <-ch
				e.t.Fatalf("setup: found no server backend waiting on a lock whose query text names %q within %v (terminated so far %v; the acquire returned %+v, %v)", e.cfg.TableName, e.slow().scale(10*time.Second), terminated, got.r, got.err)
			}
			var ok bool
			if err := e.db.QueryRowContext(e.ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
				unblock()
				<-ch
				e.t.Skipf("cannot terminate backend %d (needs superuser or pg_signal_backend): %v", pid, err)
			}
			terminated = append(terminated, pid)
			select {
			case got = <-ch:
				done = true
			case <-time.After(300 * time.Millisecond):
				if len(terminated) >= 6 {
					unblock()
					got = <-ch
					e.t.Fatalf("rule: an operation whose server backend is terminated fails; still running after %d terminations (got %+v, %v once unblocked)", len(terminated), got.r, got.err)
				}
			}
		}
		e.t.Logf("terminated backends %v", terminated)
		if got.r.OK || !errIs(got.err, syncguard.ErrServiceUnavailable) {
			e.t.Errorf("rule: an operation whose server backend is terminated fails with ErrServiceUnavailable; got %+v, %v", got.r, got.err)
		}
		unblock()
		// pg_terminate_backend only signals: a terminated backend aborts
		// its transaction, and lets go of the acquire's per-key advisory
		// lock, when its process gets to it, which on a loaded machine
		// takes a moment. Until then an acquire is rightly told "locked".
		for deadline := time.Now().Add(e.slow().scale(10 * time.Second)); ; {
			var n int
			if err := e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY ($1::int[])`, intArray(terminated)).Scan(&n); err != nil {
				e.t.Fatalf("setup: reading pg_stat_activity: %v", err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("setup: %d terminated backends still there after %v (%s)", n, e.slow().scale(10*time.Second), e.slow())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if locked := e.isLocked(e.b2, k); locked {
			e.t.Errorf("rule: a terminated acquire commits nothing; IsLocked(%q) = true", k)
		}
		r, err := b.Acquire(e.ctx, k, 30*time.Second)
		if err != nil || !r.OK {
			e.t.Errorf("rule: the next call on the same pool after a terminated backend works; got %+v, %v", r, err)
		}
	})

	registerSQL("Errors/MissingTablesNameSetupSchema", func(e *sqlEnv) {
		base := strings.TrimSuffix(suiteTable("x"), "_x")
		cfg := e.config(base+"_missing", base+"_missingf")
		b, err := syncguard.New(e.db, cfg)
		e.must(err, "New")
		k := e.key("missing")
		for op, err := range allOps(e.ctx, b, k, rules.GenerateLockID(), time.Second) {
			if op == "Acquire" || op == "IsLocked" || op == "LookupKey" || op == "Release" || op == "Extend" || op == "LookupID" {
				if err == nil || !strings.Contains(err.Error(), "SetupSchema") {
					e.t.Errorf("rule: a missing lock table gives an error that names SetupSchema; %s got %v", op, err)
				}
			}
		}
		e.t.Cleanup(func() {
			for _, tbl := range []string{cfg.TableName, cfg.FenceTableName} {
				_, _ = e.db.Exec(`DROP TABLE IF EXISTS ` + rules.QuoteIdent(tbl))
			}
		})
		e.must(syncguard.SetupSchema(e.ctx, e.db, cfg), "SetupSchema")
		r, err := b.Acquire(e.ctx, k, 30*time.Second)
		if err != nil || !r.OK {
			e.t.Errorf("rule: a Backend created before SetupSchema works once the schema exists (failures are not cached); got %+v, %v", r, err)
		}
	})
}

func asErr(err error, target **syncguard.Error) bool {
	for err != nil {
		if e, ok := err.(*syncguard.Error); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}
