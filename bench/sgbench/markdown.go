package sgbench

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// Markdown writes results (the values the program emitted as JSON lines)
// as the Markdown tables of docs/performance.md.
func Markdown(w io.Writer, results []any) {
	for _, r := range results {
		switch r := r.(type) {
		case *WorkloadResult:
			mdWorkload(w, r)
		case *RTResult:
			mdRoundTrips(w, r)
		case *WaitResult:
			mdWait(w, r)
		case *AllocResult:
			fmt.Fprintf(w, "\n#### [%s] client allocations per operation\n\n| operation | allocs/op | B/op |\n|---|--:|--:|\n", r.Driver)
			for _, x := range r.Rows {
				fmt.Fprintf(w, "| %s | %.1f | %.0f |\n", x.Op, x.AllocsPerOp, x.BytesPerOp)
			}
		case *WALResult:
			fmt.Fprintf(w, "\n#### [%s] WAL written by failed acquire attempts on a held key\n\n| variant | attempts | WAL bytes | bytes/attempt |\n|---|--:|--:|--:|\n", r.Driver)
			for _, x := range r.Rows {
				fmt.Fprintf(w, "| %s | %d | %d | %.1f |\n", x.Variant, x.Attempts, x.WALBytes, x.BytesPerAttempt)
			}
		case *AnatomyResult:
			fmt.Fprintf(w, "\n#### [%s] anatomy (synchronous_commit off, sequential, one connection)\n\n| statement | p10 µs | p50 µs |\n|---|--:|--:|\n", r.Driver)
			for _, x := range r.Rows {
				fmt.Fprintf(w, "| %s | %.0f | %.0f |\n", x.Op, x.P10, x.P50)
			}
		case *StorageResult:
			per := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/float64(r.Locks)) }
			fmt.Fprintf(w, "\n#### Storage: %d live locks, %d-byte keys\n\n| relation | bytes | bytes per lock |\n|---|--:|--:|\n", r.Locks, r.KeyBytes)
			fmt.Fprintf(w, "| lock table heap (+ FSM/VM/TOAST) | %d | %s |\n", r.TableBytes, per(r.TableBytes))
			names := make([]string, 0, len(r.IndexBytes))
			for k := range r.IndexBytes {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				fmt.Fprintf(w, "| index %s | %d | %s |\n", k, r.IndexBytes[k], per(r.IndexBytes[k]))
			}
			fmt.Fprintf(w, "| **lock table total** (pg_total_relation_size) | %d | **%s** |\n", r.TotalBytes, per(r.TotalBytes))
			fmt.Fprintf(w, "| fence counter table total (incl. primary key) | %d | %s per counter |\n", r.FenceTotalBytes, per(r.FenceTotalBytes))
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

func mdRoundTrips(w io.Writer, r *RTResult) {
	fmt.Fprintf(w, "\n#### [%s] round trips per operation (steady state)\n\n| operation | round trips | turns | client messages per op |\n|---|--:|--:|---|\n", r.Driver)
	for _, x := range r.Rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", x.Op, trimFloat(x.RoundTrips), trimFloat(x.Turns), MsgSummary(x.Messages))
	}
}
