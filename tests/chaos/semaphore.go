package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/kindcheck"
)

// The semaphore under the fault schedule (issue 30): semWorkers workers
// per adapter take permits of one key of a semaphore of semPermits through
// Semaphore.Lock (AutoExtend, or, now and then, a holder that dies: no
// extend, no release), write to an in-memory resource fenced per slot
// (semaphore.FenceKey) while they believe they hold the permit, and
// release. A trigger on the slots table records every holding that ends,
// on the server's clock; when the last worker stops, the run checks that
// each slot's holdings never overlap (never more than semPermits live
// holders), that each slot's fences strictly increase, and that the
// resource never rejected a write made in belief.

const (
	semWorkers = 3
	semPermits = 3
)

// semRun is one run's semaphore state, made by the first worker.
type semRun struct {
	once     sync.Once
	err      error
	key      string
	cfg      syncguard.Config
	audit    string   // quoted audit table
	sems     sync.Map // *adapter -> *semaphore.Semaphore
	active   atomic.Int64
	acquired atomic.Int64
	abandon  atomic.Int64
	errs     atomic.Int64

	mu       sync.Mutex
	last     map[string]int64 // FenceKey -> last accepted fence
	accepted int64
	rejected int64 // writes in belief rejected: a violation
}

var semRuns sync.Map // *runner -> *semRun

func (r *runner) semState() *semRun {
	v, _ := semRuns.LoadOrStore(r, &semRun{last: map[string]int64{}})
	s := v.(*semRun)
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.cfg = syncguard.Config{TableName: r.cfg.TableName, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		s.key = r.cfg.TableName + ":semaphore"
		if s.err = semaphore.SetupSchema(ctx, r.admin, &s.cfg); s.err != nil {
			return
		}
		if s.err = kindcheck.InstallSemaphoreAudit(ctx, r.admin, r.cfg.TableName); s.err == nil {
			s.audit = kindcheck.SemaphoreAudit(r.cfg.TableName)
		}
	})
	return s
}

func (s *semRun) semaphoreFor(a *adapter) (*semaphore.Semaphore, error) {
	if v, ok := s.sems.Load(a); ok {
		return v.(*semaphore.Semaphore), nil
	}
	sem, err := semaphore.New(a.db, &s.cfg, semPermits)
	if err != nil {
		return nil, err
	}
	v, _ := s.sems.LoadOrStore(a, sem)
	return v.(*semaphore.Semaphore), nil
}

// write is a holder's write to the per-slot fenced resource.
func (s *semRun) write(fenceKey string, fence int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence >= s.last[fenceKey] {
		s.last[fenceKey] = fence
		s.accepted++
	} else {
		s.rejected++
	}
}

// runSemaphore is a semaphore worker.
func (w *worker) runSemaphore() {
	r := w.r
	s := r.semState()
	s.active.Add(1)
	defer func() {
		if s.active.Add(-1) == 0 {
			// Their LISTEN connections stay open for a while after the
			// last wait: closed here, before the runner counts sessions.
			s.sems.Range(func(_, v any) bool { v.(*semaphore.Semaphore).Close(); return true })
			r.checkSemaphore(s)
		}
	}()
	if s.err != nil {
		r.violate(history.Violation{Rule: "the semaphore's tables can be set up", Detail: s.err.Error()})
		return
	}
	sem, err := s.semaphoreFor(w.a)
	if err != nil {
		r.violate(history.Violation{Rule: "a semaphore can be made", Detail: err.Error()})
		return
	}
	fails := 0
	for r.ctx.Err() == nil {
		abandon := w.rng.IntN(12) == 0
		opts := &syncguard.LockOptions{TTL: r.opts.TTL, AutoExtend: !abandon,
			Acquisition: syncguard.AcquisitionOptions{Timeout: acquisitionTimeout}}
		p, err := sem.Lock(r.ctx, s.key, opts)
		if err != nil {
			if syncguard.CodeOf(err) != syncguard.ErrAcquisitionTimeout && r.ctx.Err() == nil {
				s.errs.Add(1)
				fails++
				w.backoff(fails)
			}
			continue
		}
		fails = 0
		s.acquired.Add(1)
		f, _ := p.Fence().Int64()
		for range 1 + w.rng.IntN(3) {
			if time.Now().Before(p.HeldUntil()) && p.Err() == nil {
				s.write(p.FenceKey(), f)
			}
			sleepCtx(r.ctx, time.Duration(w.rng.IntN(40))*time.Millisecond)
		}
		if abandon {
			s.abandon.Add(1)
			continue // dies: its permit returns at its TTL
		}
		p.Close()
	}
}

// checkSemaphore judges the run's semaphore holdings on the server's
// clock, after the last semaphore worker stopped.
func (r *runner) checkSemaphore(s *semRun) {
	if s.err != nil || s.audit == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, vs, err := kindcheck.CheckSemaphore(ctx, r.admin, r.cfg.TableName, semPermits)
	if err != nil {
		r.violate(history.Violation{Rule: "the semaphore's audit can be read", Detail: err.Error()})
		return
	}
	for _, v := range vs {
		r.violate(v)
	}
	s.mu.Lock()
	acc, rej := s.accepted, s.rejected
	s.mu.Unlock()
	if rej > 0 {
		r.violate(history.Violation{Rule: kindcheck.RuleSemResource,
			Detail: fmt.Sprintf("%d rejected", rej)})
	}
	r.opts.Logf("chaos: semaphore of %d: %d permits acquired (%d abandoned), %d holdings checked on the server's clock, peak %d live holders, writes %d accepted / %d rejected in belief, %d errors",
		semPermits, s.acquired.Load(), s.abandon.Load(), res.Holdings, res.Peak, acc, rej, s.errs.Load())
}
