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

// table is a result as the program prints it and as Markdown shows it:
// both renderings come from this one description.
type table struct {
	driver, title string
	method        string   // how it was measured; may be empty
	cols          []string // column headers
	align         string   // per column: 'l' left, else right (Markdown)
	rows          [][]string
	targets       []Target
}

// print writes t as a tab-aligned text table, then its targets.
func (t table) print(w io.Writer) {
	fmt.Fprintf(w, "\n== [%s] %s", t.driver, t.title)
	if t.method != "" {
		fmt.Fprintf(w, " (%s)", t.method)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.cols, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
	PrintTargets(w, t.targets)
}

// markdown writes t as a Markdown section with a table.
func (t table) markdown(w io.Writer) {
	fmt.Fprintf(w, "\n#### [%s] %s\n\n", t.driver, t.title)
	if t.method != "" {
		fmt.Fprintf(w, "Method: %s.\n\n", t.method)
	}
	seps := make([]string, len(t.cols))
	for i := range seps {
		seps[i] = "--:"
		if i < len(t.align) && t.align[i] == 'l' {
			seps[i] = "---"
		}
	}
	mdRow(w, t.cols)
	fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
	for _, r := range t.rows {
		mdRow(w, r)
	}
}

func mdRow(w io.Writer, cells []string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

// tabular is a result shown as one table.
type tabular interface{ table() table }

// Print writes a result as the program's text output: a table per result,
// then its targets.
func Print(w io.Writer, result any) {
	switch r := result.(type) {
	case *WorkloadResult:
		PrintWorkload(w, r)
	case *WaitResult:
		PrintWait(w, r)
	case tabular:
		r.table().print(w)
	}
}

// TargetsOf returns a result's targets.
func TargetsOf(result any) []Target {
	switch r := result.(type) {
	case *WorkloadResult:
		return r.Targets
	case *WaitResult:
		return r.Targets
	case tabular:
		return r.table().targets
	}
	return nil
}

// TableResult is the result of a measurement that is one table of rows
// (RTResult, WALResult, AllocResult, AnatomyResult): one JSON line.
type TableResult[R tableRow] struct {
	Bench    string   `json:"bench"`
	Driver   string   `json:"driver"`
	Workload string   `json:"workload"`
	Method   string   `json:"method,omitempty"`
	Rows     []R      `json:"rows"`
	Targets  []Target `json:"targets,omitempty"`
}

// tableRow is a row of a TableResult.
type tableRow interface {
	// layout is the table's title, column headers and alignment (see
	// table.align); it is called on the zero row.
	layout() (title string, cols []string, align string)
	cells() []string
}

func (r *TableResult[R]) table() table {
	var zero R
	title, cols, align := zero.layout()
	t := table{driver: r.Driver, title: title, method: r.Method, cols: cols, align: align, targets: r.Targets}
	for _, x := range r.Rows {
		t.rows = append(t.rows, x.cells())
	}
	return t
}

func (AllocRow) layout() (string, []string, string) {
	return "client allocations per operation", []string{"operation", "allocs/op", "B/op", "µs/op"}, "l"
}

func (x AllocRow) cells() []string {
	return []string{x.Op, fmt.Sprintf("%.1f", x.AllocsPerOp), fmt.Sprintf("%.0f", x.BytesPerOp), fmt.Sprintf("%.0f", x.NsPerOp/1e3)}
}

func (WALRow) layout() (string, []string, string) {
	return "WAL written by failed acquire attempts on a held key", []string{"variant", "attempts", "WAL bytes", "bytes/attempt"}, "l"
}

func (x WALRow) cells() []string {
	return []string{x.Variant, fmt.Sprint(x.Attempts), fmt.Sprint(x.WALBytes), fmt.Sprintf("%.1f", x.BytesPerAttempt)}
}

func (AnatomyRow) layout() (string, []string, string) {
	return "anatomy: where acquire and release spend their time", []string{"statement", "p10 µs", "p50 µs"}, "l"
}

func (x AnatomyRow) cells() []string {
	return []string{x.Op, fmt.Sprintf("%.0f", x.P10), fmt.Sprintf("%.0f", x.P50)}
}

func (RTRow) layout() (string, []string, string) {
	return "round trips per operation (steady state)",
		[]string{"operation", "round trips", "turns", "conns opened", "C->S B/op", "S->C B/op", "messages per op"}, "lrrrrrl"
}

func (x RTRow) cells() []string {
	return []string{x.Op, trimFloat(x.RoundTrips), trimFloat(x.Turns), fmt.Sprint(x.ConnsOpened),
		fmt.Sprintf("%.0f", x.ClientBytes), fmt.Sprintf("%.0f", x.ServerBytes), MsgSummary(x.Messages)}
}

func (r *StorageResult) table() table {
	per := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/float64(r.Locks)) }
	t := table{driver: r.Driver, title: fmt.Sprintf("storage: %d live locks, %d-byte keys", r.Locks, r.KeyBytes),
		method: fmt.Sprintf("loaded in %.1f s", r.LoadSeconds),
		cols:   []string{"relation", "bytes", "bytes per lock"}, align: "l", targets: r.Targets}
	add := func(name, bytes, per string) { t.rows = append(t.rows, []string{name, bytes, per}) }
	add("lock table heap (+ TOAST/FSM/VM)", fmt.Sprint(r.TableBytes), per(r.TableBytes))
	for _, k := range slices.Sorted(maps.Keys(r.IndexBytes)) {
		add("index "+k, fmt.Sprint(r.IndexBytes[k]), per(r.IndexBytes[k]))
	}
	add("lock table total (pg_total_relation_size)", fmt.Sprint(r.TotalBytes), per(r.TotalBytes))
	add("average lock row (pg_column_size)", fmt.Sprintf("%.1f", r.AvgRowBytes), "")
	add("fence counter table total (incl. primary key)", fmt.Sprint(r.FenceTotalBytes), per(r.FenceTotalBytes)+" per counter")
	return t
}
