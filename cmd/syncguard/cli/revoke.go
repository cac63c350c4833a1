package cli

import (
	"cmp"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

func (a *app) cmdRevoke(args []string) error {
	fs := a.flagSet("revoke")
	key, err := a.parseKey(fs, args, `
Forces every holder of KEY out, as an operator's last resort: the mutex's,
each permit and read-write lease of KEY, each set with KEY. Each is
released as its own release would: the first waiters get what it held,
with larger fences. A holder learns it at its next extend, its lease lost
('syncguard run' stops its command and exits 76, a leader's term ends):
within a third of its TTL when it extends automatically. Until then,
fences make the resource reject its writes. A later holder is left alone.

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

	h, err := b.Revoke(ctx, key)
	var others []lockRow
	var now time.Time
	if err == nil {
		others, err = a.kindRows(ctx, key, true)
	}
	if err == nil {
		_, now, err = b.LastFence(ctx, key)
	}
	if err != nil {
		return err
	}
	none := h == nil && len(others) == 0
	if a.json {
		out := map[string]any{"key": key, "keyHash": syncguard.HashKey(key), "revoked": !none}
		if out["holdings"] = rowsJSON(others, now, true, false); h != nil {
			lockJSON(out, *h)
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
	return printRows(a.stdout, fmt.Sprintf("revoked on %s (each holder learns it at its next extend; the first waiters get what they held):\n", displayKey(key)),
		others, kindColumns, now, true)
}
