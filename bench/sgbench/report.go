package sgbench

import (
	"fmt"
	"io"
	"maps"
	"slices"
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
	keys := slices.Sorted(maps.Keys(p))
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
