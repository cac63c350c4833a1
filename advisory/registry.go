package advisory

import (
	"fmt"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Kind is the lifetime of a declared lock.
type Kind uint8

const (
	// Transaction locks (pg_advisory_xact_lock) are released when the
	// transaction commits or rolls back. Take them with Client.LockTx and
	// Client.TryLockTx.
	Transaction Kind = iota + 1
	// Session locks (pg_advisory_lock) are held by the connection until
	// unlocked or until the connection ends. Take them with Client.LockConn,
	// Client.LockSession and their Try forms.
	Session
)

func (k Kind) String() string {
	switch k {
	case Transaction:
		return "Transaction"
	case Session:
		return "Session"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Decl declares one named lock, in code: what a team otherwise keeps by
// hand in a registry table of its advisory locks (name, kind, id or hash
// inputs, purpose; see "The registry" in docs/advisory.md).
type Decl struct {
	// Name is unique in the registry, such as "booking.create". Required:
	// printable UTF-8, at most 200 bytes.
	Name string
	// Kind is Transaction or Session. Required.
	Kind Kind
	// Component, Purpose and Scope are for the generated table, such as
	// "BookingRepository", "Booking creation race prevention",
	// "Per tenant+date". Purpose is required.
	Component, Purpose, Scope string
	// Params names the arguments of a per-resource lock, such as
	// {"tenantId", "date"}: Declared.Key then takes one non-empty argument
	// for each. Empty for a single (global) lock. Each is an identifier
	// ([A-Za-z_][A-Za-z0-9_]*), unique in the list.
	Params []string
	// ID, when set, is the fixed id of a global lock from an existing
	// scheme (such as ID(42424242)). Not with Params or LegacyFNV.
	// Unset: the id is derived from the registry namespace and Name.
	ID Key
	// LegacyFNV, when set, is the hash input pattern of a lock whose ids
	// other services still compute with the document's 32-bit FNV-1a, such
	// as "{tenantId}:{date}". Every placeholder must name a parameter, and
	// every parameter must appear. Instances are
	// FromLegacyFNV1a32(pattern with the arguments substituted), so this
	// process and the legacy services exclude each other while you migrate.
	LegacyFNV string
	// Source is the file reference shown in the table. Default: the
	// declaring package's import path and file name, such as
	// "example.com/app/booking/repository.go" (no line number, so the
	// generated table changes only when declarations do).
	Source string
}

// Registry holds the named locks of a program. Components declare their
// locks in code, usually in package-level variables:
//
//	var bookingLock = locks.MustDeclare(advisory.Decl{
//		Name: "booking.create", Kind: advisory.Transaction,
//		Params: []string{"tenantId", "date"}, ...})
//
// Declaring a duplicate name, or a fixed id that another declaration already
// uses, is an error. Markdown renders the registry table. A Client whose
// Config.DeclaredOnly is set takes only keys made by its registry, and
// Client monitoring reports registry names.
//
// A Registry is safe for concurrent use.
type Registry struct {
	ns string

	mu     sync.RWMutex
	byName map[string]*Declared
	fixed  map[Key]*Declared // bare key -> declaration, for global locks

	// recent remembers the instance keys of parameterised locks made by
	// this process, so that monitoring can name them. Bounded FIFO.
	recentMu sync.Mutex
	recent   map[Key]*Declared
	ring     []Key
	next     int
}

// recentMax bounds the instance keys a Registry remembers for monitoring.
const recentMax = 4096

// NewRegistry returns an empty Registry whose derived ids live in namespace
// (see FromName). Use one namespace per application or database; the
// namespace is part of every derived id, so changing it changes them all.
// An invalid namespace is InvalidArgument.
func NewRegistry(namespace string) (*Registry, error) {
	if err := checkNamespace("advisory.newRegistry", namespace); err != nil {
		return nil, err
	}
	return &Registry{ns: namespace, byName: map[string]*Declared{}, fixed: map[Key]*Declared{},
		recent: map[Key]*Declared{}}, nil
}

// MustNewRegistry is NewRegistry that panics on an invalid namespace, for
// package-level variables.
func MustNewRegistry(namespace string) *Registry {
	r, err := NewRegistry(namespace)
	if err != nil {
		panic(err)
	}
	return r
}

// Namespace returns the registry's namespace.
func (r *Registry) Namespace() string { return r.ns }

// Declared is a lock declared in a Registry. Use Key to get the lock id of
// one instance.
type Declared struct {
	r     *Registry
	d     Decl
	fixed Key       // global locks: the id, carrying this declaration
	parts []fnvPart // LegacyFNV: the parsed pattern
}

type fnvPart struct {
	lit   string
	param int // -1 for a literal
}

// Declare adds d to the registry. A duplicate name, a fixed id already
// declared, or an invalid declaration is InvalidArgument; nothing is added
// then.
func (r *Registry) Declare(d Decl) (*Declared, error) {
	return r.declare(d, 2)
}

// MustDeclare is Declare that panics on error, for package-level variables:
// a bad declaration stops the program at start-up, as a duplicate
// sql.Register does.
func (r *Registry) MustDeclare(d Decl) *Declared {
	dd, err := r.declare(d, 2)
	if err != nil {
		panic(err)
	}
	return dd
}

func (r *Registry) declare(d Decl, skip int) (*Declared, error) {
	const op = "advisory.declare"
	bad := func(format string, a ...any) (*Declared, error) {
		e := invalidArg(op, fmt.Sprintf(format, a...))
		e.Key = d.Name
		return nil, e
	}
	if err := checkLabel(d.Name, 200); err != "" {
		return bad("Name %s", err)
	}
	if d.Kind != Transaction && d.Kind != Session {
		return bad("lock %q: Kind must be Transaction or Session", d.Name)
	}
	if strings.TrimSpace(d.Purpose) == "" {
		return bad("lock %q: Purpose is required (it documents the lock)", d.Name)
	}
	d.Params = slices.Clone(d.Params)
	for i, p := range d.Params {
		if !isIdent(p) {
			return bad("lock %q: parameter %q is not an identifier", d.Name, p)
		}
		if slices.Contains(d.Params[:i], p) {
			return bad("lock %q: parameter %q listed twice", d.Name, p)
		}
	}
	dd := &Declared{r: r, d: d}
	switch {
	case !d.ID.IsZero() && (len(d.Params) > 0 || d.LegacyFNV != ""):
		return bad("lock %q: a fixed ID is for a single lock; it cannot have Params or LegacyFNV", d.Name)
	case !d.ID.IsZero():
		if d.ID.decl != nil {
			return bad("lock %q: ID must be a raw id (ID or Pair), not a registry key", d.Name)
		}
		dd.fixed = d.ID.bare()
	case d.LegacyFNV != "":
		parts, err := parsePattern(d.LegacyFNV, d.Params)
		if err != "" {
			return bad("lock %q: LegacyFNV: %s", d.Name, err)
		}
		dd.parts = parts
		if len(d.Params) == 0 {
			dd.fixed = FromLegacyFNV1a32(d.LegacyFNV)
		}
	case len(d.Params) == 0:
		dd.fixed = ID(nameID(r.ns, d.Name))
	}
	if dd.d.Source == "" {
		dd.d.Source = callerSource(skip + 1)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.byName[d.Name]; dup {
		return bad("lock %q is already declared", d.Name)
	}
	if !dd.fixed.IsZero() {
		if other, dup := r.fixed[dd.fixed]; dup {
			return bad("lock %q: its id %s is already used by lock %q", d.Name, dd.fixed, other.d.Name)
		}
		r.fixed[dd.fixed] = dd
		dd.fixed.decl = dd
	}
	r.byName[d.Name] = dd
	return dd, nil
}

// Lookup returns the declaration of name, or nil.
func (r *Registry) Lookup(name string) *Declared {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byName[name]
}

// Key is Lookup(name).Key(args...), and InvalidArgument when name is not
// declared: locks taken through the registry can only use declared names.
func (r *Registry) Key(name string, args ...string) (Key, error) {
	d := r.Lookup(name)
	if d == nil {
		e := invalidArg("advisory.key", fmt.Sprintf("lock %q is not declared in registry %q", name, r.ns))
		e.Key = name
		return Key{}, e
	}
	return d.Key(args...)
}

// Decls returns copies of all declarations, sorted by name.
func (r *Registry) Decls() []Decl {
	r.mu.RLock()
	out := make([]Decl, 0, len(r.byName))
	for _, d := range r.byName {
		out = append(out, d.Decl())
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Decl) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// NameOf returns the registry name of the lock k, when known: always for
// global locks, and for parameterised locks when this process made k (the
// last few thousand instance keys are remembered).
func (r *Registry) NameOf(k Key) (string, bool) {
	if k.decl != nil && k.decl.r == r {
		return k.decl.d.Name, true
	}
	d := r.declOf(k)
	if d == nil {
		return "", false
	}
	return d.d.Name, true
}

func (r *Registry) declOf(k Key) *Declared {
	b := k.bare()
	r.mu.RLock()
	d := r.fixed[b]
	r.mu.RUnlock()
	if d != nil {
		return d
	}
	r.recentMu.Lock()
	defer r.recentMu.Unlock()
	return r.recent[b]
}

func (r *Registry) remember(k Key, d *Declared) {
	b := k.bare()
	r.recentMu.Lock()
	defer r.recentMu.Unlock()
	if _, ok := r.recent[b]; ok {
		return
	}
	if len(r.ring) < recentMax {
		r.ring = append(r.ring, b)
	} else {
		delete(r.recent, r.ring[r.next])
		r.ring[r.next] = b
		r.next = (r.next + 1) % recentMax
	}
	r.recent[b] = d
}

// Name returns the declared name.
func (d *Declared) Name() string { return d.d.Name }

// Kind returns the declared kind.
func (d *Declared) Kind() Kind { return d.d.Kind }

// Registry returns the registry d is declared in.
func (d *Declared) Registry() *Registry { return d.r }

// Decl returns a copy of the declaration (with Source filled in).
func (d *Declared) Decl() Decl {
	c := d.d
	c.Params = slices.Clone(c.Params)
	return c
}

// Key returns the key of one instance of the lock: no arguments for a global
// lock, one non-empty argument (valid UTF-8, no NUL) per parameter
// otherwise. Anything else is InvalidArgument.
//
// Derived ids are FromName(namespace, name) for a global lock and
// FromName(namespace, name+"\x00"+arg1+"\x00"+arg2...) for a parameterised
// one; LegacyFNV locks use FromLegacyFNV1a32 of the substituted pattern.
func (d *Declared) Key(args ...string) (Key, error) {
	const op = "advisory.key"
	bad := func(format string, a ...any) (Key, error) {
		e := invalidArg(op, fmt.Sprintf(format, a...))
		e.Key = d.d.Name
		return Key{}, e
	}
	if len(args) != len(d.d.Params) {
		return bad("lock %q takes %d argument(s) (%s), got %d", d.d.Name, len(d.d.Params), strings.Join(d.d.Params, ", "), len(args))
	}
	if len(args) == 0 {
		return d.fixed, nil
	}
	for i, a := range args {
		switch {
		case a == "":
			return bad("lock %q: argument %s must not be empty", d.d.Name, d.d.Params[i])
		case !utf8.ValidString(a):
			return bad("lock %q: argument %s must be valid UTF-8", d.d.Name, d.d.Params[i])
		case strings.IndexByte(a, 0) >= 0:
			return bad("lock %q: argument %s must not contain a NUL byte", d.d.Name, d.d.Params[i])
		}
	}
	var k Key
	if d.parts != nil {
		var b strings.Builder
		for _, p := range d.parts {
			if p.param < 0 {
				b.WriteString(p.lit)
			} else {
				b.WriteString(args[p.param])
			}
		}
		k = FromLegacyFNV1a32(b.String())
	} else {
		k = ID(nameID(d.r.ns, d.d.Name+"\x00"+strings.Join(args, "\x00")))
	}
	k.decl = d
	d.r.remember(k, d)
	return k, nil
}

// MustKey is Key that panics on error, for arguments known to be valid.
func (d *Declared) MustKey(args ...string) Key {
	k, err := d.Key(args...)
	if err != nil {
		panic(err)
	}
	return k
}

func checkLabel(s string, max int) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > max:
		return fmt.Sprintf("must be at most %d bytes", max)
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Sprintf("%q must hold printable characters only", s)
		}
	}
	return ""
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// parsePattern splits a LegacyFNV pattern into literals and parameters.
func parsePattern(pat string, params []string) ([]fnvPart, string) {
	var parts []fnvPart
	used := make([]bool, len(params))
	for pat != "" {
		i := strings.IndexAny(pat, "{}")
		if i < 0 {
			parts = append(parts, fnvPart{lit: pat, param: -1})
			break
		}
		if pat[i] == '}' {
			return nil, "unmatched '}'"
		}
		if i > 0 {
			parts = append(parts, fnvPart{lit: pat[:i], param: -1})
		}
		j := strings.IndexByte(pat[i:], '}')
		if j < 0 {
			return nil, "unmatched '{'"
		}
		name := pat[i+1 : i+j]
		p := slices.Index(params, name)
		if p < 0 {
			return nil, fmt.Sprintf("placeholder {%s} is not a parameter", name)
		}
		used[p] = true
		parts = append(parts, fnvPart{param: p})
		pat = pat[i+j+1:]
	}
	for i, u := range used {
		if !u {
			return nil, fmt.Sprintf("parameter %s does not appear in the pattern", params[i])
		}
	}
	if parts == nil {
		return nil, "empty pattern"
	}
	return parts, ""
}

// callerSource names the file of the frame skip levels above it (1: its
// caller) as "import/path/file.go".
func callerSource(skip int) string {
	pc, file, _, ok := runtime.Caller(skip)
	if !ok {
		return ""
	}
	base := path.Base(strings.ReplaceAll(file, "\\", "/"))
	fn := runtime.FuncForPC(pc)
	if fn == nil {
		return base
	}
	name := fn.Name()
	slash := strings.LastIndexByte(name, '/')
	dot := strings.IndexByte(name[slash+1:], '.')
	if dot < 0 {
		return base
	}
	return name[:slash+1+dot] + "/" + base
}
