package sgbench

import (
	"fmt"
	"io"
	"strings"
)

// Markdown writes results (the values the program emitted as JSON lines)
// as the Markdown tables of docs/performance.md.
func Markdown(w io.Writer, results []any) {
	for _, r := range results {
		switch r := r.(type) {
		case *WorkloadResult:
			mdWorkload(w, r)
		case *WaitResult:
			mdWait(w, r)
		case tabular:
			r.table().markdown(w)
		}
	}
}

func mdWorkload(w io.Writer, r *WorkloadResult) {
	fmt.Fprintf(w, "\n#### [%s] %s — %s\n\n", r.Driver, r.Workload, r.Title)
	hot := strings.HasPrefix(r.Workload, "w3_hot_key")
	pairs := r.Workload == "w1_sequential" || r.Workload == "w2_concurrent"
	switch {
	case hot:
		fmt.Fprintln(w, "| variant | attempts+releases/s | hand-offs/s | hand-offs × floor | hand-offs × ref | acquire p50 / p99 µs | release p50 / p99 µs | fence gaps | failed attempts that wrote | WAL B/op |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	case pairs:
		fmt.Fprintln(w, "| variant | ops/s | × floor | × ref | p50 µs | p99 µs | acquire p50 / p99 µs | release p50 / p99 µs | WAL B/op |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	default:
		fmt.Fprintln(w, "| variant | ops/s | × floor | × ref | p50 µs | p99 µs | WAL B/op |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|")
	}
	for _, v := range r.Variants {
		name := v.Name
		if v.Role == RoleSubject {
			name = "**" + name + "**"
		}
		switch {
		case hot:
			bumps, writes := "–", "–"
			if v.FenceBumpsLost != nil {
				bumps = fmt.Sprint(*v.FenceBumpsLost)
			}
			if v.FailedWrites != nil {
				writes = fmt.Sprintf("%d of %d", *v.FailedWrites, v.Attempts-v.Wins)
			}
			fmt.Fprintf(w, "| %s | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %.0f |\n", name, v.OpsPerSec, v.WinsPerSec,
				ratioStr(v.WinsRatioFloor), ratioStr(v.WinsRatioRef), mdLat(v.Acquire), mdLat(v.Release), bumps, writes, v.WALBytesPerOp)
		case pairs:
			fmt.Fprintf(w, "| %s | %.0f | %s | %s | %.0f | %.0f | %s | %s | %.0f |\n", name, v.OpsPerSec, ratioStr(v.RatioFloor), ratioStr(v.RatioRef),
				v.Lat.P50, v.Lat.P99, mdLat(v.Acquire), mdLat(v.Release), v.WALBytesPerOp)
		default:
			fmt.Fprintf(w, "| %s | %.0f | %s | %s | %.0f | %.0f | %.0f |\n", name, v.OpsPerSec, ratioStr(v.RatioFloor), ratioStr(v.RatioRef), v.Lat.P50, v.Lat.P99, v.WALBytesPerOp)
		}
	}
}

func mdLat(l *Lat) string {
	if l == nil {
		return "–"
	}
	return fmt.Sprintf("%.0f / %.0f", l.P50, l.P99)
}
