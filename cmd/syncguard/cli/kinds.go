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
	syncguard.Queuer
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

// kindRow is a live holding of another kind than the mutex, for status
// and ls: a permit, a read-write lock's lease, a set of keys.
type kindRow struct {
	kind          string            // "permit", "shared", "exclusive", "set"
	keys          []string          // its key; a set's keys
	fences        []syncguard.Fence // each key's fence (a reader's: its writer generation)
	slot, permits int               // a permit's
	syncguard.LockInfo
}

// kindRows reads the holdings of the other kinds on key (status), or all
// (ls: key ""): which kinds have tables (none: not in use), then each
// kind's List.
func (a *app) kindRows(ctx context.Context, key string) ([]kindRow, error) {
	table, _ := a.tableNames()
	_, slots, _ := semaphore.Tables(table)
	var in [3]bool
	if err := a.db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL, to_regclass($3) IS NOT NULL`,
		rules.QuoteIdent(slots), rules.QuoteIdent(table+"_rw"), rules.QuoteIdent(table+"_ml")).Scan(&in[0], &in[1], &in[2]); err != nil {
		return nil, errwrap.Wrap(ctx, a.cmd, pgxstd.Dialect, err)
	}
	row := func(kind, key string, f syncguard.Fence, id string, acq, exp time.Time, ident string) kindRow {
		return kindRow{kind: kind, keys: []string{key}, fences: []syncguard.Fence{f}, LockInfo: syncguard.LockInfo{KeyHash: syncguard.HashKey(key),
			LockIDHash: id, Fence: f, AcquiredAt: acq, ExpiresAt: exp, Identity: ident}}
	}
	var rows []kindRow
	sem, err := semaphore.New(a.db, a.config(), 1)
	if err == nil && in[0] {
		permits, e := sem.List(ctx)
		for _, p := range permits {
			r := row("permit", p.Key, p.Fence, p.LockIDHash, p.AcquiredAt, p.ExpiresAt, p.Identity)
			r.slot, r.permits = p.Slot, p.Permits
			rows = append(rows, r)
		}
		err = e
	}
	rw, e := rwlock.New(a.db, a.config())
	if err = cmp.Or(err, e); err == nil && in[1] {
		leases, e := rw.List(ctx)
		for _, l := range leases {
			rows = append(rows, row(map[bool]string{true: "exclusive", false: "shared"}[l.Exclusive], l.Key, l.Fence, l.LockIDHash, l.AcquiredAt, l.ExpiresAt, l.Identity))
		}
		err = e
	}
	ml, e := multilock.New(a.db, a.config())
	if err = cmp.Or(err, e); err == nil && in[2] {
		sets, e := ml.List(ctx)
		for _, h := range sets {
			r := kindRow{kind: "set", LockInfo: syncguard.LockInfo{KeyHash: syncguard.HashKey(h.Set), LockIDHash: h.LockIDHash,
				ExpiresAt: h.ExpiresAt, AcquiredAt: h.AcquiredAt, Identity: h.Identity}}
			for _, f := range h.Fences {
				r.keys, r.fences, r.Fence = append(r.keys, f.Key), append(r.fences, f.Fence), max(r.Fence, f.Fence)
			}
			rows = append(rows, r)
		}
		err = e
	}
	if err != nil {
		return nil, err
	}
	nkey, _ := rules.NormalizeKey(key)
	return slices.DeleteFunc(rows, func(r kindRow) bool { return key != "" && !slices.Contains(r.keys, nkey) }), nil
}

// kindTable prints lead and rows: KIND KEY FENCE ACQUIRED EXPIRES HOLDER
// (nothing when there are none); show displays a key (or its hash).
func kindTable(out io.Writer, lead string, rows []kindRow, now time.Time, show func(string) string) error {
	if len(rows) == 0 {
		return nil
	}
	w := table(out)
	fmt.Fprint(w, lead)
	fmt.Fprintln(w, "KIND\tKEY\tFENCE\tACQUIRED\tEXPIRES\tHOLDER")
	for _, r := range rows {
		ks, fs := make([]string, len(r.keys)), make([]string, len(r.keys))
		for i, k := range r.keys {
			ks[i], fs[i] = show(k), string(r.fences[i])
		}
		kind, holder := r.kind, "lock#"+r.LockIDHash
		if r.kind == "permit" {
			kind = fmt.Sprintf("permit %d/%d", r.slot, r.permits)
		}
		if r.Identity != "" {
			holder = displayKey(r.Identity)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", kind, strings.Join(ks, " "), strings.Join(fs, ","), rel(r.AcquiredAt, now), rel(r.ExpiresAt, now), holder)
	}
	return w.Flush()
}

// kindJSON is rows for --json: as ls's locks, with the kind, the keys'
// hashes (and keys) and fences, a permit's slot.
func kindJSON(rows []kindRow, now time.Time, keys bool) []map[string]any {
	out := []map[string]any{}
	for _, r := range rows {
		m := map[string]any{"kind": r.kind, "expiresInMs": r.ExpiresAt.Sub(now).Milliseconds(), "fences": r.fences, "keyHashes": []string{}}
		for _, k := range r.keys {
			m["keyHashes"] = append(m["keyHashes"].([]string), syncguard.HashKey(k))
		}
		if lockJSON(m, r.LockInfo); keys {
			m["keys"] = r.keys
		}
		if r.kind == "permit" {
			m["slot"], m["permits"] = r.slot, r.permits
		}
		out = append(out, m)
	}
	return out
}
