package sgbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// HandOffTarget adds W6c's target to its result.
func HandOffTarget(r *WaitResult) {
	for _, row := range r.Rows {
		if row.Variant == VarNotify {
			r.Targets = append(r.Targets, Target{Name: "w6c hand-off latency p50 ms (release return to acquire return, another process)", Value: row.P50, Goal: "<= 2", Met: row.P50 <= 2 && row.Acquired > 0})
		}
	}
}

// Child is a waiter process of W6c, started by the caller of HandOff (the
// benchmark program runs itself with -w6c-child).
type Child struct {
	In    io.WriteCloser
	Out   *bufio.Reader
	Close func() error // waits for the process to exit
}

// HandOff runs W6c: this process holds the key and releases it while the
// child process waits for it in Lock; the latency is from this process's
// Release returning to the child's Lock returning, both read from the wall
// clock of this one machine.
func (w *WaitEnv) HandOff(ctx context.Context, variants []string, iterations int, spawn func(variant string) (*Child, error)) (*WaitResult, error) {
	res := &WaitResult{Bench: "syncguard", Driver: w.Driver, Workload: "w6c",
		Title:   "hand-off latency: one holder, one waiter in another process",
		Measure: "from the holder's Release returning to the waiter's Lock returning",
		Params:  map[string]any{"iterations": iterations, "holder_hold_ms": "30-50 (after the waiter started)"}}
	for _, name := range variants {
		if name == VarNotifyOne {
			continue
		}
		row, err := w.handOff(ctx, name, iterations, spawn)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		res.Rows = append(res.Rows, row)
	}
	HandOffTarget(res)
	return res, nil
}

func (w *WaitEnv) handOff(ctx context.Context, name string, iterations int, spawn func(string) (*Child, error)) (row WaitRow, err error) {
	row.Variant = name
	holder, err := w.OpenProc(ctx, name, 2)
	if err != nil {
		return row, err
	}
	defer holder.close()
	c, err := spawn(name)
	if err != nil {
		return row, err
	}
	defer func() {
		c.In.Close()
		if cerr := c.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("child: %w", cerr)
		}
	}()
	if line, err := c.Out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		return row, fmt.Errorf("child did not start: %q %v", line, err)
	}
	key := fmt.Sprintf("%s:w6c:%d", w.RunID, slices.Index(WaitVariants, name))
	var lat []time.Duration
	for i := range iterations + 5 { // the first 5 warm up
		hr, err := holder.locker.Acquire(ctx, key, 30*time.Second)
		if err != nil || !hr.OK {
			return row, fmt.Errorf("holder acquire: %+v %v", hr, err)
		}
		if _, err := fmt.Fprintf(c.In, "lock %s\n", key); err != nil {
			return row, err
		}
		time.Sleep(30*time.Millisecond + time.Duration(i%5)*5*time.Millisecond)
		rr, err := holder.locker.Release(ctx, hr.LockID)
		released := time.Now().UnixNano()
		if err != nil || !rr.OK {
			return row, fmt.Errorf("holder release: %+v %v", rr, err)
		}
		line, err := c.Out.ReadString('\n')
		if err != nil {
			return row, fmt.Errorf("child: %w", err)
		}
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "got" {
			got, _ := strconv.ParseInt(f[1], 10, 64)
			if i >= 5 {
				lat = append(lat, time.Duration(got-released))
				row.Acquired++
			}
			continue
		}
		if strings.Contains(line, "AcquisitionTimeout") {
			row.Timeouts++
		} else {
			row.Errors++
			if row.FirstError == "" {
				row.FirstError = strings.TrimSpace(line)
			}
		}
	}
	row.P50, row.P99, row.Max = summarizeMs(lat)
	return row, nil
}

// ServeHandOff is the child side of W6c: for each line "lock <key>" it
// calls Lock with the variant's locker (default acquisition options, TTL
// 30 s), notes the wall clock when Lock returns, releases, and answers
// "got <unix nanoseconds>" or "err <error>".
func (w *WaitEnv) ServeHandOff(ctx context.Context, variant string, in io.Reader, out io.Writer) error {
	p, err := w.OpenProc(ctx, variant, 2)
	if err != nil {
		return err
	}
	defer p.close()
	bw := bufio.NewWriter(out)
	fmt.Fprintln(bw, "ready")
	bw.Flush()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[0] != "lock" {
			return fmt.Errorf("unexpected command %q", sc.Text())
		}
		l, err := syncguard.Lock(ctx, p.locker, f[1], &syncguard.LockOptions{TTL: 30 * time.Second})
		got := time.Now().UnixNano()
		if err != nil {
			fmt.Fprintf(bw, "err %v\n", err)
		} else {
			l.Close()
			fmt.Fprintf(bw, "got %d\n", got)
		}
		bw.Flush()
	}
	return sc.Err()
}
