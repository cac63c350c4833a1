package multilock

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
	"golang.org/x/text/unicode/norm"
)

// MaxKeys is the largest number of keys in one set.
const MaxKeys = 64

// setPrefix starts every encoded set, so that a set's key string never
// looks like a plain key in logs and errors.
const setPrefix = "multilock:"

// Keys returns the canonical encoding of the set of keys, the key string
// that Locker's methods, syncguard.Lock and syncguard.WithLock take:
// "multilock:" and a JSON array of the keys in NFC form, sorted by their
// bytes. The order the keys are named in does not matter: Keys("b", "a")
// == Keys("a", "b"). Keys does not validate: an empty, invalid, duplicate
// or excess key is reported by the first operation, before any I/O, as
// an InvalidArgument *syncguard.Error.
func Keys(keys ...string) string {
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = norm.NFC.String(k)
	}
	slices.Sort(ks)
	b, _ := json.Marshal(ks) // []string always marshals
	return setPrefix + string(b)
}

// ParseKeys returns the keys of an encoded set (made by Keys), in
// canonical order, after checking them as every operation does: 1 to
// MaxKeys keys, each valid by the core's key rules, none twice (after
// normalization). Bad input is an InvalidArgument *syncguard.Error.
func ParseKeys(set string) ([]string, error) {
	ks, err := parse("parseKeys", set)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.Norm
	}
	return out, nil
}

// parse decodes and checks an encoded set: its keys, derived and sorted
// by storage key (the one order of every statement).
func parse(op, set string) ([]rules.Key, *syncguard.Error) {
	bad := func(msg string) ([]rules.Key, *syncguard.Error) {
		return nil, &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Key: set, Msg: msg}
	}
	body, ok := strings.CutPrefix(set, setPrefix)
	if !ok {
		return bad(`not a set of keys: make it with multilock.Keys (it starts with "multilock:")`)
	}
	var raw []string
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		return bad("not a set of keys: its JSON array of strings does not parse: make it with multilock.Keys")
	}
	switch {
	case len(raw) == 0:
		return bad("a set must have at least one key")
	case len(raw) > MaxKeys:
		return bad(fmt.Sprintf("a set has at most %d keys, got %d", MaxKeys, len(raw)))
	}
	ks := make([]rules.Key, 0, len(raw))
	for i, r := range raw {
		k, err := rules.DeriveKey(r)
		if err != nil {
			return bad(fmt.Sprintf("key %d of the set: %s", i+1, kit.RuleErr(op, err).Msg))
		}
		ks = append(ks, k)
	}
	first := make(map[string]int, len(ks)) // storage key -> its position as given, 1-based
	for i, k := range ks {
		if j, dup := first[k.Storage]; dup {
			// By position in the set's array (Error.Key is the set): an
			// error's text never shows a raw key.
			return bad(fmt.Sprintf("keys %d and %d of the set's array (Error.Key) are the same key, key#%s, after normalization: name each key once",
				j, i+1, syncguard.HashKey(k.Norm)))
		}
		first[k.Storage] = i + 1
	}
	slices.SortFunc(ks, func(a, b rules.Key) int { return strings.Compare(a.Storage, b.Storage) })
	return ks, nil
}

// setJSON is the set as the statements take it: [{"s","f","u"}] in
// canonical order.
func setJSON(ks []rules.Key) string {
	type item struct {
		S string `json:"s"`
		F string `json:"f"`
		U string `json:"u"`
	}
	items := make([]item, len(ks))
	for i, k := range ks {
		items[i] = item{k.Storage, k.Fence, k.Norm}
	}
	b, _ := json.Marshal(items)
	return string(b)
}

// SetLocker is what Lock needs: a syncguard.Locker of encoded sets (Keys)
// that reports the per-key fences of a holding. *Locker is one, and so is
// the in-memory fake of package syncguardtest (NewMultiLock).
type SetLocker interface {
	syncguard.Locker
	// Fences returns each key of the holding lockID with its fence, in
	// canonical order; nil when the lockId holds nothing.
	Fences(ctx context.Context, lockID string) ([]KeyFence, error)
}

// Lease is a held set: a *syncguard.Lease (TTL, AutoExtend, Done, Extend,
// Close, all for every key at once) with the fence of each key.
type Lease struct {
	*syncguard.Lease
	fences []KeyFence
}

// Fences returns each key of the set with its fence, in canonical order.
func (l *Lease) Fences() []KeyFence { return append([]KeyFence(nil), l.fences...) }

// FenceOf returns the fence of key (any normalization form) in this
// holding; false when key is not in the set.
func (l *Lease) FenceOf(key string) (syncguard.Fence, bool) {
	key = norm.NFC.String(key)
	for _, f := range l.fences {
		if f.Key == key {
			return f.Fence, true
		}
	}
	return "", false
}

// Keys returns the keys of the set, in canonical order.
func (l *Lease) Keys() []string {
	ks := make([]string, len(l.fences))
	for i, f := range l.fences {
		ks[i] = f.Key
	}
	return ks
}

// Lock takes every key of keys at once, waiting as syncguard.Lock waits
// (opts: nil for the defaults; Acquisition.Timeout bounds the whole wait,
// once, not per key), and returns the Lease of the set with each key's
// fence. The keys may be named in any order; an empty, invalid or
// duplicate key, or more than MaxKeys, is an InvalidArgument
// *syncguard.Error before any I/O. End the lease with Close.
func Lock(ctx context.Context, l SetLocker, keys []string, opts *syncguard.LockOptions) (*Lease, error) {
	if l == nil {
		return nil, kit.InvalidArg("lock", "locker must not be nil")
	}
	set := Keys(keys...)
	if _, e := parse("lock", set); e != nil {
		return nil, e
	}
	lease, err := syncguard.Lock(ctx, l, set, opts)
	if err != nil {
		return nil, err
	}
	f, err := l.Fences(ctx, lease.LockID())
	if err == nil && len(f) != len(keys) {
		err = &syncguard.Error{Op: "lock", Code: syncguard.ErrInternal, Key: set, Msg: "the holding's fences could not be read back",
			Err: syncguard.ErrLockLost}
	}
	if err != nil {
		lease.Close()
		return nil, err
	}
	return &Lease{Lease: lease, fences: f}, nil
}

// WithLock runs fn while holding every key of keys, as syncguard.WithLock
// does for one key: the set is released when fn returns, fails or panics.
// It returns fn's error unchanged.
func WithLock(ctx context.Context, l SetLocker, keys []string, fn func(ctx context.Context, lease *Lease) error, opts *syncguard.LockOptions) error {
	if fn == nil {
		return kit.InvalidArg("lock", "fn must not be nil")
	}
	lease, err := Lock(ctx, l, keys, opts)
	if err != nil {
		return err
	}
	defer lease.Close()
	fnCtx := ctx
	if opts != nil && opts.AutoExtend {
		var cancel context.CancelFunc
		fnCtx, cancel = lease.Bind(ctx)
		defer cancel()
	}
	return fn(fnCtx, lease)
}
