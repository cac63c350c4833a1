package conformance

import (
	"testing"
	"time"
)

func TestLeftoverTablesByAge(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	old := now.Add(-leftoverAge - time.Minute).Unix()
	recent := now.Add(-leftoverAge + time.Minute).Unix()
	for name, want := range map[string]bool{
		fmtTable(old, "locks"):              true,
		fmtTable(old, "bookings"):           true,
		fmtTable(recent, "locks"):           false,
		"sgc_0123456789_locks":              false, // the old unnamed-age format: not ours to judge
		"syncguard_locks":                   false,
		"sgc_6b49d200_abcdef_locks; DROP x": false,
	} {
		if got := leftover(name, now); got != want {
			t.Errorf("leftover(%q) = %v, want %v", name, got, want)
		}
	}
	if n := suiteTable("fences"); !suiteTableRE.MatchString(n) || leftover(n, time.Now()) || len(n) > 51 {
		t.Errorf("suiteTable gives %q: must match the sweep's pattern, be new, and fit Config's 51 bytes", n)
	}
}

func fmtTable(unix int64, what string) string {
	return "sgc_" + hex8(unix) + "_abcdef_" + what
}

func hex8(n int64) string {
	const digits = "0123456789abcdef"
	var b [8]byte
	for i := 7; i >= 0; i-- {
		b[i] = digits[n&0xf]
		n >>= 4
	}
	return string(b[:])
}
