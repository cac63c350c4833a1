package sgbench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

func ratioStr(r float64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", r)
}

// PrintWorkload writes a workload's table.
func PrintWorkload(w io.Writer, r *WorkloadResult) {
	fmt.Fprintf(w, "\n== [%s] %s: %s\n", r.Driver, r.Workload, r.Title)
	fmt.Fprintf(w, "   unit: %s; params: %s\n", r.Unit, params(r.Params))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hot := strings.HasPrefix(r.Workload, "w3_hot_key")
	pairs := r.Workload == "w1_sequential" || r.Workload == "w2_concurrent" || hot
	hdr := "variant\tops/s\tp50 µs\tp99 µs\tx floor\tx ref"
	if pairs {
		hdr = "variant\tops/s\tp50 µs\tp99 µs\tacq p50/p99 µs\trel p50/p99 µs\tx floor\tx ref"
		if hot {
			hdr += "\thand-offs/s\tx floor\tx ref\tfence gaps\tfailed attempts that wrote"
		} else {
			hdr += "\tpairs/s"
		}
	}
	hdr += "\tWAL B/op\terrors\t"
	fmt.Fprintln(tw, hdr)
	for _, v := range r.Variants {
		row := fmt.Sprintf("%s\t%.0f\t%.0f\t%.0f", v.Name, v.OpsPerSec, v.Lat.P50, v.Lat.P99)
		if pairs {
			row += fmt.Sprintf("\t%s\t%s", latStr(v.Acquire), latStr(v.Release))
		}
		row += fmt.Sprintf("\t%s\t%s", ratioStr(v.RatioFloor), ratioStr(v.RatioRef))
		if hot {
			bumps, writes := "-", "-"
			if v.FenceBumpsLost != nil {
				bumps = fmt.Sprint(*v.FenceBumpsLost)
			}
			if v.FailedWrites != nil {
				writes = fmt.Sprintf("%d of %d", *v.FailedWrites, v.Attempts-v.Wins)
			}
			row += fmt.Sprintf("\t%.0f\t%s\t%s\t%s\t%s", v.WinsPerSec, ratioStr(v.WinsRatioFloor), ratioStr(v.WinsRatioRef), bumps, writes)
		} else if pairs {
			row += fmt.Sprintf("\t%.0f", v.WinsPerSec)
		}
		row += fmt.Sprintf("\t%.0f\t%d\t", v.WALBytesPerOp, v.Errors)
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	for _, v := range r.Variants {
		if v.FirstError != "" {
			fmt.Fprintf(w, "   ! %s: %d errors, first: %s\n", v.Name, v.Errors, v.FirstError)
		}
	}
	PrintTargets(w, r.Targets)
}

func latStr(l *Lat) string {
	if l == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f/%.0f", l.P50, l.P99)
}

func params(p map[string]any) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, p[k])
	}
	return strings.Join(parts, " ")
}

// PrintTargets writes each target with MET / NOT MET.
func PrintTargets(w io.Writer, ts []Target) {
	for _, t := range ts {
		mark := "MET    "
		if !t.Met {
			mark = "NOT MET"
		}
		fmt.Fprintf(w, "   [%s] %s: %.3g (goal %s)\n", mark, t.Name, t.Value, t.Goal)
	}
}

// PrintRoundTrips writes the round-trip table.
func PrintRoundTrips(w io.Writer, r *RTResult) {
	fmt.Fprintf(w, "\n== [%s] round trips per operation (%s)\n", r.Driver, r.Method)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "operation\tround trips\tturns\tconns opened\tC->S B/op\tS->C B/op\tmessages per op")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\t%.0f\t%s\n", x.Op, trimFloat(x.RoundTrips), trimFloat(x.Turns), x.ConnsOpened, x.ClientBytes, x.ServerBytes, MsgSummary(x.Messages))
	}
	tw.Flush()
	PrintTargets(w, r.Targets)
}

// PrintAllocs writes the allocation table.
func PrintAllocs(w io.Writer, r *AllocResult) {
	fmt.Fprintf(w, "\n== [%s] client allocations per operation (sequential, MemStats deltas as in testing.B)\n", r.Driver)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "operation\tallocs/op\tB/op\tµs/op")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.0f\n", x.Op, x.AllocsPerOp, x.BytesPerOp, x.NsPerOp/1e3)
	}
	tw.Flush()
	PrintTargets(w, r.Targets)
}

// PrintWAL writes the failed-attempt WAL probe.
func PrintWAL(w io.Writer, r *WALResult) {
	fmt.Fprintf(w, "\n== [%s] WAL written by failed acquire attempts on a held key (%s)\n", r.Driver, r.Method)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "variant\tattempts\tWAL bytes\tbytes/attempt")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\n", x.Variant, x.Attempts, x.WALBytes, x.BytesPerAttempt)
	}
	tw.Flush()
	PrintTargets(w, r.Targets)
}

// PrintStorage writes the storage result.
func PrintStorage(w io.Writer, r *StorageResult) {
	fmt.Fprintf(w, "\n== [%s] storage: %d live locks, %d-byte keys (loaded in %.1fs)\n", r.Driver, r.Locks, r.KeyBytes, r.LoadSeconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "relation\tbytes\tbytes per lock")
	per := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/float64(r.Locks)) }
	fmt.Fprintf(tw, "lock table heap (+TOAST/FSM/VM)\t%d\t%s\n", r.TableBytes, per(r.TableBytes))
	names := make([]string, 0, len(r.IndexBytes))
	for k := range r.IndexBytes {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(tw, "  index %s\t%d\t%s\n", k, r.IndexBytes[k], per(r.IndexBytes[k]))
	}
	fmt.Fprintf(tw, "lock table total (pg_total_relation_size)\t%d\t%s\n", r.TotalBytes, per(r.TotalBytes))
	fmt.Fprintf(tw, "fence counters total (incl. primary key)\t%d\t%s per counter\n", r.FenceTotalBytes, per(r.FenceTotalBytes))
	tw.Flush()
	fmt.Fprintf(w, "   average lock row (pg_column_size): %.1f bytes\n", r.AvgRowBytes)
	PrintTargets(w, r.Targets)
}

// PrintAnatomy writes the cost breakdown.
func PrintAnatomy(w io.Writer, r *AnatomyResult) {
	fmt.Fprintf(w, "\n== [%s] anatomy: where acquire and release spend their time (%s)\n", r.Driver, r.Method)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "statement\tp10 µs\tp50 µs")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\n", x.Op, x.P10, x.P50)
	}
	tw.Flush()
}
