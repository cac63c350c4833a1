package sgbench

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// WaitRow is one variant's result in a waiting workload.
type WaitRow struct {
	Variant     string  `json:"variant"`
	Utilization float64 `json:"utilization_pct,omitempty"` // W6a/b: time held / wall time
	Acquired    int     `json:"acquired"`
	Timeouts    int     `json:"acquisition_timeouts"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	P50         float64 `json:"p50_ms"` // wait (W6a/b), hand-off (W6c), delay after expiry (W6d)
	P99         float64 `json:"p99_ms"`
	Max         float64 `json:"max_ms"`
	// W6a/b: the hand-off gap, from one fn's end to the next one's start
	// (consecutive holds within a segment).
	GapP50  float64 `json:"gap_p50_ms,omitempty"`
	GapP99  float64 `json:"gap_p99_ms,omitempty"`
	GapMean float64 `json:"gap_mean_ms,omitempty"`
}

// WaitResult is one waiting workload: one JSON line.
type WaitResult struct {
	Bench    string         `json:"bench"`
	Driver   string         `json:"driver"`
	Workload string         `json:"workload"`
	Title    string         `json:"title"`
	Measure  string         `json:"measure"` // what P50/P99/Max measure
	Params   map[string]any `json:"params"`
	Rows     []WaitRow      `json:"rows"`
	Targets  []Target       `json:"targets,omitempty"`
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func summarizeMs(ds []time.Duration) (p50, p99, mx float64) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return msf(Percentile(ds, 0.5)), msf(Percentile(ds, 0.99)), msf(ds[len(ds)-1])
}

func gapStr(x WaitRow) string {
	if x.GapMean == 0 && x.GapP99 == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f / %.2f / %.1f", x.GapP50, x.GapMean, x.GapP99)
}

// PrintWait writes a waiting workload's table.
func PrintWait(w io.Writer, r *WaitResult) {
	fmt.Fprintf(w, "\n== [%s] %s: %s\n", r.Driver, r.Workload, r.Title)
	fmt.Fprintf(w, "   measure: %s; params: %s\n", r.Measure, params(r.Params))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tutilization %\tacquired\ttimeouts\terrors\tp50 ms\tp99 ms\tmax ms\tgap p50/mean/p99 ms\t")
	for _, x := range r.Rows {
		u := "-"
		if x.Utilization > 0 {
			u = fmt.Sprintf("%.1f", x.Utilization)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%s\t\n", x.Variant, u, x.Acquired, x.Timeouts, x.Errors, x.P50, x.P99, x.Max, gapStr(x))
	}
	tw.Flush()
	for _, x := range r.Rows {
		if x.FirstError != "" {
			fmt.Fprintf(w, "   ! %s: %d errors, first: %s\n", x.Variant, x.Errors, x.FirstError)
		}
	}
	PrintTargets(w, r.Targets)
}

func mdWait(w io.Writer, r *WaitResult) {
	fmt.Fprintf(w, "\n#### [%s] %s — %s\n\n%s.\n\n| variant | utilization %% | acquired | timeouts | errors | p50 ms | p99 ms | max ms | hand-off gap p50 / mean / p99 ms |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n",
		r.Driver, r.Workload, r.Title, r.Measure)
	for _, x := range r.Rows {
		u := "–"
		if x.Utilization > 0 {
			u = fmt.Sprintf("%.1f", x.Utilization)
		}
		name := x.Variant
		if x.Variant == VarNotify || x.Variant == VarNotifyOne {
			name = "**" + name + "**"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %.2f | %.2f | %.2f | %s |\n", name, u, x.Acquired, x.Timeouts, x.Errors, x.P50, x.P99, x.Max, gapStr(x))
	}
}

func meanMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return msf(sum / time.Duration(len(ds)))
}
