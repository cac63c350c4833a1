// Command demo shows the syncguard command at work, the way a newcomer
// meets a lock library: from a shell. It starts a throwaway PostgreSQL,
// creates the lock tables with `syncguard setup`, and lets three "cron
// hosts" run the same job on one key with `syncguard run`: first all at
// once trying once (one runs, two are turned away with exit 75), then
// waiting their turn (each job runs alone, with a larger fence than the
// one before). `syncguard status` and `syncguard ls` look on.
//
//	make demo
//
// Each contender is a real process: the demo re-executes itself as the
// syncguard command (package cli), so nothing needs to be installed. Set
// DATABASE_URL to use an existing database instead of a throwaway one. The
// demo exits non-zero if an invariant breaks.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/cmd/syncguard/cli"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

const (
	key = "jobs:nightly-report"
	// job is what each host runs under the lock: it prints the fence
	// syncguard hands it, works for a second, and says it is done.
	job = `echo "job running with fence $SYNCGUARD_FENCE"; sleep 1; echo "job done"`
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "syncguard" {
		// Re-executed as the syncguard command.
		os.Exit(cli.Main(os.Args[2:]))
	}
	log.SetFlags(0)
	log.SetPrefix("demo: ")
	os.Exit(run())
}

func run() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		fmt.Println("Starting a throwaway PostgreSQL (set DATABASE_URL to use your own) ...")
		srv, err := pgtest.Start(ctx, pgtest.Options{Fsync: true})
		if err != nil {
			log.Printf("no PostgreSQL: %v", err)
			return 1
		}
		defer srv.Stop()
		dsn = srv.DSN
	}
	self, err := os.Executable()
	if err != nil {
		log.Print(err)
		return 1
	}
	d := &demo{self: self, dsn: dsn, start: time.Now()}
	if err := d.run(); err != nil {
		fmt.Printf("\nINVARIANT BROKEN: %v\n", err)
		return 1
	}
	return 0
}

type demo struct {
	self, dsn string
	start     time.Time
	mu        sync.Mutex // serializes output and events
	events    []event
}

// event is a line a job printed, as the demo received it.
type event struct {
	at    time.Time
	host  string
	fence string // "job running with fence F"
	done  bool   // "job done"
}

var runningRE = regexp.MustCompile(`^job running with fence (\d{15})$`)

func (d *demo) run() error {
	fmt.Println()
	if code := d.cmd("setup"); code != 0 {
		return fmt.Errorf("syncguard setup exited %d", code)
	}

	// 1. Overlap prevention.
	fmt.Printf("\n1. Three cron hosts start the job at the same moment. Each tries once (--wait 0):\n" +
		"   one runs it, the others are turned away with exit status 75 (lock busy).\n\n")
	fmt.Printf("   $ syncguard run --key %s --wait 0 -v -- sh -c '%s'\n\n", key, job)
	codes := d.contend("--wait", "0")
	ran, busy := 0, 0
	for _, c := range codes {
		switch c {
		case 0:
			ran++
		case cli.ExitBusy:
			busy++
		}
	}
	if ran != 1 || busy != 2 {
		return fmt.Errorf("round 1: %d hosts ran the job and %d were turned away, want 1 and 2 (exit statuses %v)", ran, busy, codes)
	}
	round1 := d.fences()

	// 2. Queueing.
	fmt.Printf("\n2. The same three hosts, now willing to wait up to 20s (--wait 20s): they take turns.\n" +
		"   Every holder gets a larger fence than the one before; give it to whatever the job\n" +
		"   writes to, and have that reject smaller ones.\n\n")
	fmt.Printf("   $ syncguard run --key %s --wait 20s -v -- sh -c '%s'\n\n", key, job)
	look := make(chan struct{})
	go func() {
		defer close(look)
		// While the first job runs: who holds the lock?
		if !d.waitRunning(len(round1)+1, 10*time.Second) {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		fmt.Printf("\n   Meanwhile, an operator asks who holds it:\n   $ syncguard status %s\n", key)
		d.show("status", key)
		fmt.Printf("   $ syncguard ls\n")
		d.show("ls")
		fmt.Println()
	}()
	codes = d.contend("--wait", "20s")
	<-look
	for i, c := range codes {
		if c != 0 {
			return fmt.Errorf("round 2: host %d exited %d, want 0", i+1, c)
		}
	}
	if err := d.checkHandOffs(len(round1) + 3); err != nil {
		return err
	}

	// 3. After all of it.
	fmt.Printf("\n3. All done: the lock is free, and the fence counter remembers the last fence.\n\n")
	fmt.Printf("   $ syncguard status %s\n", key)
	d.show("status", key)
	fmt.Printf("   $ syncguard ls\n")
	d.show("ls")
	var st struct {
		Held      bool   `json:"held"`
		LastFence string `json:"lastFence"`
	}
	if err := json.Unmarshal([]byte(d.output("status", "--json", key)), &st); err != nil {
		return fmt.Errorf("status --json: %v", err)
	}
	all := d.fences()
	if st.Held || st.LastFence != all[len(all)-1] {
		return fmt.Errorf("after the runs: held=%v lastFence=%s, want free with last fence %s", st.Held, st.LastFence, all[len(all)-1])
	}
	fmt.Printf("\nFences in the order the jobs ran: %s (strictly increasing).\n", strings.Join(all, " < "))
	fmt.Printf("Exit statuses: 0 the job's own, 75 lock busy, 76 lock lost while running; see docs/cli.md.\n")
	fmt.Printf("Done in %.1fs.\n", time.Since(d.start).Seconds())
	return nil
}

// syncguard returns a command running the syncguard CLI (this program,
// re-executed) against the demo's database.
func (d *demo) syncguard(args ...string) *exec.Cmd {
	c := exec.Command(d.self, append([]string{"syncguard"}, args...)...)
	c.Env = append(os.Environ(), "DATABASE_URL="+d.dsn)
	return c
}

// cmd runs a syncguard command, printing what it prints, indented.
func (d *demo) cmd(args ...string) int {
	fmt.Printf("   $ syncguard %s\n", strings.Join(args, " "))
	return d.show(args...)
}

func (d *demo) show(args ...string) int {
	c := d.syncguard(args...)
	out, err := c.CombinedOutput()
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Printf("   %s\n", l)
	}
	if err != nil {
		return c.ProcessState.ExitCode()
	}
	return 0
}

func (d *demo) output(args ...string) string {
	out, _ := d.syncguard(args...).Output()
	return string(out)
}

// contend starts three hosts running the job on the key at once and
// returns their exit statuses.
func (d *demo) contend(flags ...string) []int {
	hosts := []string{"host-a", "host-b", "host-c"}
	codes := make([]int, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		args := append(append([]string{"run", "--key", key}, flags...), "-v", "--", "sh", "-c", job)
		c := d.syncguard(args...)
		stdout, _ := c.StdoutPipe()
		stderr, _ := c.StderrPipe()
		if err := c.Start(); err != nil {
			log.Fatal(err)
		}
		var lines sync.WaitGroup
		lines.Add(2)
		go d.lines(h, stdout, &lines)
		go d.lines(h, stderr, &lines)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lines.Wait()
			err := c.Wait()
			codes[i] = c.ProcessState.ExitCode()
			what := "the job ran"
			switch {
			case codes[i] == cli.ExitBusy:
				what = "lock busy: the job is running elsewhere"
			case codes[i] == cli.ExitLost:
				what = "lock lost"
			case err != nil:
				what = err.Error()
			}
			d.say(h, fmt.Sprintf("=> exit %d (%s)", codes[i], what))
		}()
	}
	wg.Wait()
	return codes
}

func (d *demo) lines(host string, r io.Reader, wg *sync.WaitGroup) {
	defer wg.Done()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l := sc.Text()
		ev := event{at: time.Now(), host: host}
		if m := runningRE.FindStringSubmatch(l); m != nil {
			ev.fence = m[1]
		}
		ev.done = l == "job done"
		d.mu.Lock()
		if ev.fence != "" || ev.done {
			d.events = append(d.events, ev)
		}
		d.mu.Unlock()
		d.say(host, strings.TrimPrefix(l, "syncguard: run: "))
	}
}

func (d *demo) say(host, line string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Printf("   %5.2fs  %s | %s\n", time.Since(d.start).Seconds(), host, line)
}

// fences returns the fences of the jobs that ran, in the order they ran.
func (d *demo) fences() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var f []string
	for _, e := range d.events {
		if e.fence != "" {
			f = append(f, e.fence)
		}
	}
	return f
}

func (d *demo) waitRunning(n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if len(d.fences()) >= n {
			time.Sleep(200 * time.Millisecond)
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// checkHandOffs verifies that want jobs ran, one at a time, with strictly
// increasing fences.
func (d *demo) checkHandOffs(want int) error {
	d.mu.Lock()
	evs := append([]event(nil), d.events...)
	d.mu.Unlock()
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	running, last, n := "", "", 0
	for _, e := range evs {
		switch {
		case e.fence != "":
			if running != "" {
				return fmt.Errorf("%s started the job (fence %s) while %s was still running it", e.host, e.fence, running)
			}
			if e.fence <= last {
				return fmt.Errorf("fence %s of %s is not greater than the previous fence %s", e.fence, e.host, last)
			}
			running, last = e.host, e.fence
			n++
		case e.done:
			if running != e.host {
				return fmt.Errorf("%s finished a job it was not known to run", e.host)
			}
			running = ""
		}
	}
	if n != want {
		return fmt.Errorf("%d jobs ran, want %d", n, want)
	}
	return nil
}
