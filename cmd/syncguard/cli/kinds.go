package cli

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/pgxstd"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
)

// kindVars are the variables run gives COMMAND besides the fence's:
// replaced in a nested run's, and no --fence-env.
var kindVars = []string{keyEnv, "SYNCGUARD_SLOT", "SYNCGUARD_FENCE_KEY", "SYNCGUARD_MODE", "SYNCGUARD_FENCES"}

// runLocker is what run holds: the Backend's mutex, a semaphore's permit,
// a read-write lock's side or a set, each waiting in its queue (Queuer).
type runLocker interface {
	syncguard.LockBackend
	kit.Queuer
	Close() error
}

// rwSide is one side of a read-write lock; Close closes its RWLock.
type rwSide struct {
	*rwlock.Locker
	io.Closer
}

func kindFlags(fs *flag.FlagSet, o *runOpts) {
	fs.Func("permits", "hold one of `N` permits (1 to 10000) of a semaphore on KEY: at most N runs at once (the key's first holder fixes N)", func(s string) (err error) {
		if o.permits, err = strconv.Atoi(strings.TrimSpace(s)); err != nil || o.permits < 1 || o.permits > semaphore.MaxPermits {
			return fmt.Errorf("%q is not a number of permits: want 1 to %d", s, semaphore.MaxPermits)
		}
		return nil
	})
	fs.BoolVar(&o.shared, "shared", false, "hold KEY's read-write lock shared, with other --shared runs (like flock -s)")
	fs.BoolVar(&o.shared, "s", false, "short for --shared")
	fs.BoolVar(&o.exclusive, "exclusive", false, "hold KEY's read-write lock exclusive, alone (like flock -x; without -s/-x, KEY is a mutex, another lock)")
	fs.BoolVar(&o.exclusive, "x", false, "short for --exclusive")
}

// kinds lists the kinds of lock asked for; more than one is a usage error.
func (o *runOpts) kinds() (k []string) {
	for i, on := range []bool{o.permits > 0, o.shared, o.exclusive, len(o.keys) > 1} {
		if on {
			k = append(k, [...]string{"--permits", "--shared", "--exclusive", "several keys"}[i])
		}
	}
	return k
}

// label names the lock in messages: KEY, or a set's keys.
func (o *runOpts) label() string {
	ks := []string{}
	for _, k := range o.keys {
		ks = append(ks, displayKey(k))
	}
	return map[bool]string{true: "{" + strings.Join(ks, ", ") + "}", false: displayKey(o.key)}[len(ks) > 1]
}

// runLocker returns b, or the lock of the kind run was asked for on db.
func (a *app) runLocker(db *sql.DB, b *syncguard.Backend, o *runOpts) (runLocker, error) {
	switch {
	case o.permits > 0:
		return semaphore.New(db, a.config(), o.permits)
	case o.shared || o.exclusive:
		rw, err := rwlock.New(db, a.config())
		if err != nil {
			return nil, err
		}
		return rwSide{map[bool]*rwlock.Locker{true: rw.Shared(), false: rw.Exclusive()}[o.shared], rw}, nil
	case len(o.keys) > 1:
		return multilock.New(db, a.config())
	}
	return b, nil
}

// kindEnv is COMMAND's variables of the kind: a permit's slot and fence
// key, the mode, a set's fences (JSON). No I/O: lk remembers them.
func kindEnv(lk runLocker, o *runOpts, lease *syncguard.Lease) ([]string, error) {
	switch l := lk.(type) {
	case *semaphore.Semaphore:
		slot, ok := l.Slot(lease.LockID())
		if !ok {
			return nil, fmt.Errorf("the slot of the permit of %s is unknown", o.label())
		}
		return []string{"SYNCGUARD_SLOT=" + strconv.Itoa(slot), "SYNCGUARD_FENCE_KEY=" + semaphore.FenceKey(o.key, slot)}, nil
	case rwSide:
		return []string{"SYNCGUARD_MODE=" + map[bool]string{true: "exclusive", false: "shared"}[l.IsExclusive()]}, nil
	case *multilock.Locker:
		fences, err := l.Fences(context.Background(), lease.LockID())
		m := map[string]string{}
		for _, f := range fences {
			m[f.Key] = string(f.Fence)
		}
		j, _ := json.Marshal(m)
		return []string{"SYNCGUARD_FENCES=" + string(j)}, err
	}
	return nil, nil
}

// lockRow is a lock of any kind as status and ls show it: a mutex's
// lease, a semaphore's permit, a read-write lock's lease, a set of keys.
type lockRow struct {
	kind          string            // "mutex", "permit", "shared", "exclusive", "set"
	keys, hashes  []string          // its key, a set's keys (a mutex's only with ls --keys or --raw), and their hashes
	fences        []syncguard.Fence // each key's fence (a reader's: its writer generation)
	slot, permits int               // a permit's
	lockID        string            // a mutex's, with ls --raw
	live          bool              // a mutex's: not expired (ls --expired)
	syncguard.LockInfo
}

// kindColumns are the columns of the other kinds' holdings.
var kindColumns = []string{"KIND", "KEY", "FENCE", "ACQUIRED", "EXPIRES", "HOLDER"}

// kindRows reads the holdings of the other kinds on key (status), or all
// (ls: key ""): which kinds have tables (none: not in use), then each
// kind's List; with revoke, each kind's Revoke of key, which ends them.
func (a *app) kindRows(ctx context.Context, key string, revoke bool) ([]lockRow, error) {
	sem, err := semaphore.New(a.db, a.config(), 1)
	rw, e := rwlock.New(a.db, a.config())
	ml, e2 := multilock.New(a.db, a.config())
	if err = cmp.Or(err, e, e2); err != nil {
		return nil, err
	}
	_, slots, _ := semaphore.Tables(sem.TableName())
	holders, _, _ := rwlock.Tables(rw.TableName())
	var in [3]bool
	if err := a.db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL, to_regclass($3) IS NOT NULL`,
		rules.QuoteIdent(slots), rules.QuoteIdent(holders), rules.QuoteIdent(ml.Tables().Locks)).Scan(&in[0], &in[1], &in[2]); err != nil {
		return nil, errwrap.Wrap(ctx, a.cmd, pgxstd.Dialect, err)
	}
	row := func(kind, key string, f syncguard.Fence, id string, acq, exp time.Time, ident string) lockRow {
		h := syncguard.HashKey(key)
		return lockRow{kind: kind, keys: []string{key}, hashes: []string{h}, fences: []syncguard.Fence{f}, LockInfo: syncguard.LockInfo{KeyHash: h,
			LockIDHash: id, Fence: f, AcquiredAt: acq, ExpiresAt: exp, Identity: ident}}
	}
	var rows []lockRow
	semList, rwList, mlList := sem.List, rw.List, ml.List
	if revoke {
		semList = func(ctx context.Context) ([]*semaphore.Holding, error) { return sem.Revoke(ctx, key) }
		rwList = func(ctx context.Context) ([]*rwlock.Holding, error) { return rw.Revoke(ctx, key) }
		mlList = func(ctx context.Context) ([]*multilock.Holding, error) { return ml.Revoke(ctx, key) }
	}
	if err == nil && in[0] {
		permits, e := semList(ctx)
		for _, p := range permits {
			r := row("permit", p.Key, p.Fence, p.LockIDHash, p.AcquiredAt, p.ExpiresAt, p.Identity)
			r.slot, r.permits = p.Slot, p.Permits
			rows = append(rows, r)
		}
		err = e
	}
	if err == nil && in[1] {
		leases, e := rwList(ctx)
		for _, l := range leases {
			rows = append(rows, row(map[bool]string{true: "exclusive", false: "shared"}[l.Exclusive], l.Key, l.Fence, l.LockIDHash, l.AcquiredAt, l.ExpiresAt, l.Identity))
		}
		err = e
	}
	if err == nil && in[2] {
		sets, e := mlList(ctx)
		for _, h := range sets {
			r := lockRow{kind: "set", LockInfo: syncguard.LockInfo{KeyHash: syncguard.HashKey(h.Set), LockIDHash: h.LockIDHash,
				ExpiresAt: h.ExpiresAt, AcquiredAt: h.AcquiredAt, Identity: h.Identity}}
			for _, f := range h.Fences {
				r.keys, r.hashes, r.fences = append(r.keys, f.Key), append(r.hashes, syncguard.HashKey(f.Key)), append(r.fences, f.Fence)
				r.Fence = max(r.Fence, f.Fence)
			}
			rows = append(rows, r)
		}
		err = e
	}
	if err != nil {
		return nil, err
	}
	nkey, _ := rules.NormalizeKey(key)
	return slices.DeleteFunc(rows, func(r lockRow) bool { return key != "" && !slices.Contains(r.keys, nkey) }), nil
}

// cells are r's columns by name: its keys as they are (keys) or as hashes.
func (r lockRow) cells(now time.Time, keys bool) map[string]string {
	ks, fs := make([]string, len(r.hashes)), make([]string, len(r.hashes))
	for i, h := range r.hashes {
		ks[i], fs[i] = "key#"+h, string(r.fences[i])
		if keys {
			ks[i] = displayKey(r.keys[i])
		}
	}
	kind, holder := r.kind, "lock#"+r.LockIDHash
	if r.kind == "permit" {
		kind = fmt.Sprintf("permit %d/%d", r.slot, r.permits)
	}
	if r.Identity != "" {
		holder = displayKey(r.Identity)
	}
	return map[string]string{"KIND": kind, "KEY": strings.Join(ks, " "), "FENCE": strings.Join(fs, ","), "ACQUIRED": rel(r.AcquiredAt, now),
		"EXPIRES": rel(r.ExpiresAt, now), "HOLDER": holder, "LOCKID": r.lockID, "STATE": map[bool]string{true: "live", false: "expired"}[r.live]}
}

// printRows prints lead and rows in aligned columns, cols (see cells)
// under their names; nothing when there are no rows.
func printRows(out io.Writer, lead string, rows []lockRow, cols []string, now time.Time, keys bool) error {
	if len(rows) == 0 {
		return nil
	}
	w := table(out)
	fmt.Fprint(w, lead)
	fmt.Fprintln(w, strings.Join(cols, "\t"))
	for _, r := range rows {
		cells, line := r.cells(now, keys), make([]string, len(cols))
		for i, c := range cols {
			line[i] = cells[c]
		}
		fmt.Fprintln(w, strings.Join(line, "\t"))
	}
	return w.Flush()
}

// rowsJSON is rows for --json: with lockJSON's fields, a mutex's lease
// has its key's hash (and key) and, with raw, its lockId; another kind's
// holding has the kind, its keys' hashes (and keys) and fences, a permit's
// slot.
func rowsJSON(rows []lockRow, now time.Time, keys, raw bool) []map[string]any {
	out := []map[string]any{}
	for _, r := range rows {
		m := map[string]any{"expiresInMs": r.ExpiresAt.Sub(now).Milliseconds()}
		lockJSON(m, r.LockInfo)
		switch {
		case r.kind == "mutex":
			m["keyHash"], m["live"] = r.KeyHash, r.live
			if keys {
				m["key"] = r.keys[0]
			}
			if raw {
				m["lockId"] = r.lockID
			}
		case r.kind == "permit":
			m["slot"], m["permits"] = r.slot, r.permits
			fallthrough
		default:
			m["kind"], m["fences"], m["keyHashes"] = r.kind, r.fences, r.hashes
			if keys {
				m["keys"] = r.keys
			}
		}
		out = append(out, m)
	}
	return out
}
