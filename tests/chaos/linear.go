package chaos

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/linear"
)

// The linearizability check of a run (tests/pgtest/linear): the audit
// trigger on the run's tables, the resource's writes as operations, and the
// verdict at the end.

// installAudit adds the audit trigger to the run's tables.
func (r *runner) installAudit(ctx context.Context) error {
	return history.InstallAudit(ctx, r.admin, r.cfg.TableName, r.cfg.FenceTableName)
}

// resWrite writes to the fenced resource and records the write.
func (r *runner) resWrite(client, key string, fence int64, zombie bool) bool {
	call := time.Now()
	ok := r.res.write(key, fence, zombie)
	out := history.Fail
	if ok {
		out = history.OK
	}
	if !r.opts.CompactHistory {
		r.hist.Record(history.Op{Client: client, Key: key, Kind: history.OpWrite, Fence: fence, Call: call, Return: time.Now(), Outcome: out})
	}
	return ok
}

// checkLinear runs the checker over the run's operations and audit (nil
// for a run that compacts its history: it no longer has them all).
func (r *runner) checkLinear() *linear.Result {
	if r.opts.CompactHistory {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := linear.Options{Dir: r.opts.LinearDir}
	var err error
	if err = retryAfterRestart(func() error {
		opts.Audit, err = history.ReadAudit(ctx, r.admin, r.cfg.TableName)
		return err
	}); err == nil {
		opts.Audited = true
	} else {
		r.opts.Logf("chaos: reading the audit: %v (unknown outcomes stay unknown)", err)
	}
	res := linear.Check(r.hist.Ops(), opts)
	r.opts.Logf("chaos: %s", res.Line())
	return res
}
