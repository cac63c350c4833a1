package cli

import (
	"cmp"
	"context"
	"fmt"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
)

func (a *app) cmdRevoke(args []string) error {
	fs := a.flagSet("revoke")
	key, err := a.parseKey(fs, args, `
Forces every holder of KEY out, as an operator's last resort (a stuck job,
a leader to depose): the mutex's holder, every semaphore permit of KEY,
every read-write lease of KEY (shared and exclusive) and every multi-key
set that has KEY. Each is released as its own release would, so what it
held goes at once to the first process waiting for it, with a larger
fence. A holder learns it at its next extend: its lease ends as lost (a
'syncguard run' stops its command and exits 76, an elected leader's term
ends), within a third of its TTL for holders that extend automatically.
Until then it may still be running: fences make the resource reject its
writes.

Only the holdings found are revoked: one that ended by itself meanwhile
leaves a new holder alone.

Exit status: 0 when a holder was revoked, 1 when KEY had none (like
status), 64/69/70/77 on errors.`)
	if err != nil {
		return err
	}
	ctx, b, done, err := a.session()
	if err != nil {
		return err
	}
	defer done()

	h, err := syncguard.Revoke(ctx, b, key)
	if err != nil {
		return err
	}
	others, err := a.revokeKinds(ctx, key)
	if err != nil {
		return err
	}
	none := h == nil && len(others) == 0
	if a.json {
		out := map[string]any{"key": key, "keyHash": syncguard.HashKey(key), "revoked": !none}
		if h != nil {
			lockJSON(out, *h)
		}
		if len(others) > 0 {
			_, now, err := b.LastFence(ctx, key)
			if err != nil {
				return err
			}
			out["holdings"] = rowsJSON(others, now, true, false)
		}
		return cmp.Or(writeJSON(a.stdout, out), freeStatus(none))
	}
	if none {
		fmt.Fprintf(a.stdout, "%s is not held: nothing revoked\n", displayKey(key))
		return freeStatus(true)
	}
	if h != nil {
		fmt.Fprintf(a.stdout, "revoked %s: fence %s, holder %s (it learns it at its next extend); the first waiter gets the key, with a larger fence\n",
			displayKey(key), h.Fence, holderText(*h))
	}
	if len(others) == 0 {
		return nil
	}
	_, now, err := b.LastFence(ctx, key)
	if err != nil {
		return err
	}
	return printRows(a.stdout, fmt.Sprintf("revoked on %s (each holder learns it at its next extend; the first waiters get what they held):\n", displayKey(key)),
		others, kindColumns, now, true)
}

// revokeKinds revokes the holdings of KEY of the other kinds whose tables
// exist, through each kind's Revoke, and returns them as status shows them.
func (a *app) revokeKinds(ctx context.Context, key string) ([]lockRow, error) {
	in, err := a.kindsInUse(ctx)
	if err != nil {
		return nil, err
	}
	var rows []lockRow
	if in[0] {
		sem, err := semaphore.New(a.db, a.config(), 1)
		if err != nil {
			return nil, err
		}
		st, err := sem.Revoke(ctx, key)
		for _, p := range st.Holders {
			r := row("permit", key, p.Fence, p.LockIDHash, p.AcquiredAt, p.ExpiresAt, p.Identity)
			r.slot, r.permits = p.Slot, st.Permits
			rows = append(rows, r)
		}
		if err != nil {
			return rows, err
		}
	}
	if in[1] {
		rw, err := rwlock.New(a.db, a.config())
		if err != nil {
			return rows, err
		}
		leases, err := rw.Revoke(ctx, key)
		for _, l := range leases {
			rows = append(rows, row(map[bool]string{true: "exclusive", false: "shared"}[l.Exclusive], key, l.Fence, l.LockIDHash, l.AcquiredAt, l.ExpiresAt, l.Identity))
		}
		if err != nil {
			return rows, err
		}
	}
	if in[2] {
		ml, err := multilock.New(a.db, a.config())
		if err != nil {
			return rows, err
		}
		sets, err := ml.Revoke(ctx, key)
		for _, s := range sets {
			rows = append(rows, setRow(s))
		}
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}
