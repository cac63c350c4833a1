package pgtest

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// LongEnv selects the long suites (the PgBouncer conformance matrix, the
// failover run, the fault suite): `make check`, which CI runs, sets it to
// 1; the everyday `make test` leaves it unset, and they skip, saying so.
const LongEnv = "SYNCGUARD_LONG"

// LongRun reports whether the long suites run (LongEnv is 1).
func LongRun() bool { return os.Getenv(LongEnv) == "1" }

// Long skips t, naming what it is and where it runs, unless LongEnv is 1.
// It never skips silently: the skip says why, and `make test` prints the
// list of what it leaves to `make check`.
func Long(t testing.TB, what string) {
	t.Helper()
	if !LongRun() {
		t.Skipf("%s: a long suite, left to `make check` (%s=1)", what, LongEnv)
	}
}

// MinParallel raises go test's -parallel to at least n unless -parallel
// was given on the command line. It is for a test package whose tests
// spend their time waiting, not computing (the conformance suite waits for
// expiries, TTLs and wake-ups): on 2 cores, the default -parallel of 2
// leaves the machine mostly idle. Call it from TestMain, before Main.
func MinParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	f := flag.Lookup("test.parallel")
	if given || f == nil {
		return
	}
	if cur, err := strconv.Atoi(f.Value.String()); err == nil && cur < n {
		_ = f.Value.Set(strconv.Itoa(n))
	}
}
