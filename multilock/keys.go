package multilock

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

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
		return nil, &syncguard.Error{Op: op, Code: syncguard.CodeInvalidArgument, Key: set, Msg: msg}
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
			msg := err.Error()
			var ae *rules.ArgError
			if errors.As(err, &ae) {
				msg = ae.Msg
			}
			return bad(fmt.Sprintf("key %d of the set: %s", i+1, msg))
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
