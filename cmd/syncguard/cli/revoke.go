package cli

import (
	"cmp"
	"fmt"

	"github.com/syncguard/syncguard-go/syncguard"
)

func (a *app) cmdRevoke(args []string) error {
	fs := a.flagSet("revoke")
	key, err := a.parseKey(fs, args, `
Forces the holder of KEY out, as an operator's last resort (a stuck job, a
leader to depose): releases its lock as its own release would, so the key
goes at once to the first process waiting for it, with a larger fence. The
holder learns it at its next extend: its lease ends as lost (a 'syncguard
run' stops its command and exits 76, an elected leader's term ends),
within a third of its TTL for holders that extend automatically. Until
then it may still be running: fences make the resource reject its writes.

Only the holding found is revoked: if it ended by itself meanwhile, a new
holder is left alone.

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
	if a.json {
		out := map[string]any{"key": key, "keyHash": syncguard.HashKey(key), "revoked": h != nil}
		if h != nil {
			lockJSON(out, *h)
		}
		return cmp.Or(writeJSON(a.stdout, out), freeStatus(h == nil))
	}
	if h == nil {
		fmt.Fprintf(a.stdout, "%s is not held: nothing revoked\n", displayKey(key))
		return freeStatus(true)
	}
	fmt.Fprintf(a.stdout, "revoked %s: fence %s, holder %s (it learns it at its next extend); the first waiter gets the key, with a larger fence\n",
		displayKey(key), h.Fence, holderText(*h))
	return nil
}
