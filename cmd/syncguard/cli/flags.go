package cli

import (
	"flag"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Forever is the value of a duration flag set to "forever" (only --wait
// accepts it).
const Forever time.Duration = math.MaxInt64

// durationFlag is every duration flag: seconds ("10", "2.5") or a Go
// duration ("500ms"), "forever" where allowed, its range checked when set
// (from the command line or the environment alike: exit 64).
type durationFlag struct {
	d        *time.Duration
	min, max time.Duration
	forever  bool // accepts "forever" (and "infinity", "inf")
}

var bareSeconds = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// parseDuration parses a duration flag's value: seconds or a Go duration.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if bareSeconds.MatchString(s) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f*float64(time.Second) >= math.MaxInt64/2 {
			return 0, fmt.Errorf("%q is too long", s)
		}
		return time.Duration(math.Round(f * float64(time.Second))), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if strings.Contains(err.Error(), "invalid duration") || strings.Contains(err.Error(), "missing unit") || strings.Contains(err.Error(), "unknown unit") {
			return 0, fmt.Errorf("%q is not a duration: want seconds (10, 2.5) or a Go duration (500ms, 1m30s)", s)
		}
		return 0, fmt.Errorf("%q: %v", s, strings.TrimPrefix(err.Error(), "time: "))
	}
	return d, nil
}

func (f *durationFlag) Set(s string) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "forever", "infinity", "inf":
		if !f.forever {
			return fmt.Errorf("%q is not allowed here (only --wait can be forever)", s)
		}
		*f.d = Forever
		return nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return fmt.Errorf("%v; range %s", err, f.rangeText())
	}
	if d < f.min || d > f.max {
		return fmt.Errorf("%s is out of range: want %s", fmtDuration(d), f.rangeText())
	}
	*f.d = d
	return nil
}

func (f *durationFlag) rangeText() string {
	t := fmt.Sprintf("%s to %s", fmtDuration(f.min), fmtDuration(f.max))
	if f.forever {
		t += ", or forever"
	}
	return t
}

func (f *durationFlag) String() string {
	if f == nil || f.d == nil {
		return ""
	}
	return fmtDuration(*f.d)
}

// fmtDuration prints a duration compactly: 30s, 1m30s, 500ms, forever.
func fmtDuration(d time.Duration) string {
	switch {
	case d == Forever:
		return "forever"
	case d == 0:
		return "0s"
	}
	s := strings.Replace(d.String(), "m0s", "m", 1)
	if s, ok := strings.CutSuffix(s, "h0m"); ok {
		return s + "h"
	}
	return s
}

// durationVar registers a duration flag on fs (not forever).
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, min, max time.Duration, usage string) {
	*p = def
	fs.Var(&durationFlag{d: p, min: min, max: max}, name, usage)
}

// EnvPrefix starts the environment variable of every flag: --no-prepare is
// SYNCGUARD_NO_PREPARE, --wait SYNCGUARD_WAIT.
const EnvPrefix = "SYNCGUARD_"

// notFromEnv are the flags without an environment variable: --key and
// --command (a nested syncguard run must not take its parent's, and run
// gives COMMAND $SYNCGUARD_KEY), the short forms, and the actions.
var notFromEnv = map[string]bool{
	"key": true, "command": true, "version": true, "help": true, "h": true,
	"v": true, "q": true, "n": true, "w": true, "E": true, "c": true, "s": true, "x": true,
}

// envName is the environment variable of flag name.
func envName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// applyEnv sets the flags of fs accepted by keep from their environment
// variables, before the command line is parsed (so the command line wins).
// An empty variable counts as unset. A bad value is a usage error naming
// the variable.
func (a *app) applyEnv(fs *flag.FlagSet, keep func(name string) bool) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || notFromEnv[f.Name] || !keep(f.Name) {
			return
		}
		v := a.getenv(envName(f.Name))
		if v == "" {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			if isBoolFlag(f) {
				e = fmt.Errorf("want 1 or 0, true or false")
			}
			err = usageErr("$%s=%s: %v", envName(f.Name), v, e)
		}
	})
	return err
}
