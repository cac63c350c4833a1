package cli

import (
	"cmp"
	"fmt"
	"strconv"
	"unicode"

	"github.com/syncguard/syncguard-go/syncguard"
)

const sensitiveNote = "sensitive: whoever has a lockId can release its lock"

func (a *app) cmdStatus(args []string) error {
	fs := a.flagSet("status")
	raw := fs.Bool("raw", false, "also print the holder's raw lockId ("+sensitiveNote+")")
	key, err := a.parseKey(fs, args, `
Shows whether KEY is held, and if so its fence, expiry, acquisition time
and the holder's lockId hash (HashKey, safe to log). When KEY is free it
shows the last fence handed out for it: the next holder gets a larger one.
Times are relative to the server's clock, which decides expiry.

Exit status: 0 when KEY is held, 1 when it is free (like systemctl
is-active), 64/69/70/77 on errors.`)
	if err != nil {
		return err
	}
	ctx, b, done, err := a.session()
	if err != nil {
		return err
	}
	defer done()

	info, err := b.LookupKeyDebug(ctx, key)
	if err != nil {
		return err
	}
	last, now, err := b.LastFence(ctx, key)
	if err != nil {
		return err
	}
	rows, err := a.kindRows(ctx, key, false)
	if err != nil {
		return err
	}

	if a.json {
		out := map[string]any{
			"key": key, "keyHash": syncguard.HashKey(key), "held": info != nil,
			"serverTime": jsonTime(now), "lastFence": nil,
		}
		if last != "" {
			out["lastFence"] = string(last)
		}
		if info != nil {
			lockJSON(out, *info)
			out["expiresInMs"] = info.ExpiresAt.Sub(now).Milliseconds()
			if *raw {
				out["lockId"] = info.LockID
			}
		}
		if len(rows) > 0 {
			out["holdings"] = rowsJSON(rows, now, true, false)
		}
		return cmp.Or(writeJSON(a.stdout, out), freeStatus(info == nil && len(rows) == 0))
	}

	w := table(a.stdout)
	fmt.Fprintf(w, "key\t%s\n", displayKey(key))
	if info == nil {
		lastText := "none (never acquired)"
		if last != "" {
			lastText = string(last) + " (the next holder gets a larger one)"
		}
		fmt.Fprintf(w, "state\tfree\nlast fence\t%s\n", lastText)
	} else {
		fmt.Fprintf(w, "state\theld\nfence\t%s\nexpires\t%s (%s)\nacquired\t%s (%s)\nholder\t%s\n", info.Fence,
			rel(info.ExpiresAt, now), stamp(info.ExpiresAt), rel(info.AcquiredAt, now), stamp(info.AcquiredAt), holderText(*info))
	}
	if *raw && info != nil {
		fmt.Fprintf(w, "lockId\t%s (%s)\n", info.LockID, sensitiveNote)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return cmp.Or(printRows(a.stdout, "\nalso held as a semaphore permit, read-write lock or set (independent locks):\n", rows, kindColumns, now, true),
		freeStatus(info == nil && len(rows) == 0))
}

// lockJSON adds a holding's fields to the JSON of status, ls and revoke.
func lockJSON(out map[string]any, info syncguard.LockInfo) {
	out["fence"], out["acquiredAt"], out["expiresAt"] = string(info.Fence), jsonTime(info.AcquiredAt), jsonTime(info.ExpiresAt)
	out["lockIdHash"], out["identity"] = info.LockIDHash, info.Identity
}

// freeStatus is the result of status, revoke and leader: exit 1 (ExitFree)
// when the key is free.
func freeStatus(free bool) error {
	if free {
		return &cliError{status: ExitFree, silent: true}
	}
	return nil
}

// displayKey shows a key as is when it is plain, quoted otherwise (spaces,
// control characters), so columns stay aligned.
func displayKey(k string) string {
	for _, r := range k {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '"' {
			return strconv.Quote(k)
		}
	}
	return k
}

func (a *app) cmdLs(args []string) error {
	fs := a.flagSet("ls")
	expired := fs.Bool("expired", false, "also list expired lock rows (they stay until their key is acquired again)")
	keys := fs.Bool("keys", false, "print raw keys instead of their hashes (keys may hold personal data), and still only the hashes of lockIds")
	raw := fs.Bool("raw", false, "print raw keys and lockIds instead of their hashes ("+sensitiveNote+"; keys may hold personal data)")
	limit := fs.Int("limit", 100, "list at most `N` locks; 0 for all")
	if err := a.parseNoArgs(fs, args, `
Lists the active locks, newest first: key hash, fence, acquisition time,
expiry and the holder's identity or lockId hash. Keys and lockIds are shown
as HashKey values (as the library logs them) unless --keys (raw keys) or
--raw (raw keys and lockIds) is given. A lock is active while
expires_at_ms > server now_ms - 1000, the rule every syncguard operation
uses.`); err != nil {
		return err
	}
	if *limit < 0 {
		return usageErr("--limit must not be negative")
	}
	ctx, b, done, err := a.session()
	if err != nil {
		return err
	}
	defer done()

	lim := *limit
	if lim == 0 {
		lim = -1 // all
	}
	list, err := b.List(ctx, &syncguard.ListOptions{Limit: lim, Expired: *expired, Raw: *raw || *keys})
	if err != nil {
		return err
	}
	rows, err := a.kindRows(ctx, "", false)
	if err != nil {
		return err
	}
	now, locks, show := list.Now, []lockRow{}, *raw || *keys
	for _, r := range list.Locks {
		locks = append(locks, lockRow{kind: "mutex", keys: []string{r.Key}, hashes: []string{r.KeyHash}, fences: []syncguard.Fence{r.Fence},
			lockID: r.LockID, live: list.Live(r), LockInfo: r})
	}

	if a.json {
		out := map[string]any{"serverTime": jsonTime(now), "locks": rowsJSON(locks, now, show, *raw), "truncated": list.More}
		if len(rows) > 0 {
			out["holdings"] = rowsJSON(rows, now, show, *raw)
		}
		return writeJSON(a.stdout, out)
	}

	if len(locks) == 0 && len(rows) == 0 {
		fmt.Fprintln(a.stdout, map[bool]string{false: "no active locks", true: "no lock rows"}[*expired])
		return nil
	}
	cols := []string{"KEY", "FENCE", "ACQUIRED", "EXPIRES", "HOLDER"}
	if *raw {
		cols = append(cols, "LOCKID")
	}
	if *expired {
		cols = append(cols, "STATE")
	}
	if err := printRows(a.stdout, "", locks, cols, now, show); err != nil {
		return err
	}
	err = printRows(a.stdout, map[bool]string{true: "\n"}[len(locks) > 0], rows, kindColumns, now, show)
	if list.More {
		a.notef("only the newest %d shown; use --limit 0 for all", *limit)
	}
	if *raw {
		a.notef("%s", sensitiveNote)
	}
	return err
}
