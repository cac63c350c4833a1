package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// rel formats t relative to now: "in 12s", "3s ago", "now".
func rel(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case d > -time.Millisecond && d < time.Millisecond:
		return "now"
	case d > 0:
		return "in " + short(d)
	default:
		return short(-d) + " ago"
	}
}

// short formats a positive duration compactly: 450ms, 2.5s, 12s, 3m05s,
// 2h10m, 3d4h.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s := int(d.Round(time.Second).Seconds())
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case d < 48*time.Hour:
		m := int(d.Round(time.Minute).Minutes())
		return fmt.Sprintf("%dh%02dm", m/60, m%60)
	default:
		h := int(d.Round(time.Hour).Hours())
		return fmt.Sprintf("%dd%dh", h/24, h%24)
	}
}

// stamp is a time for people: local time with milliseconds and zone.
func stamp(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05.000 MST") }

// jsonTime is a time for scripts: RFC 3339 in UTC, milliseconds.
func jsonTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// plural formats n with its noun: "1 lock", "2 locks".
func plural(n int, one, many string) string {
	if n != 1 {
		one = many
	}
	return fmt.Sprintf("%d %s", n, one)
}
