package ha

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Faults only a Patroni cluster has.
const (
	// StopPatroni: SIGTERM to the primary's Patroni, which stops its
	// PostgreSQL and gives up the leader key; the member is started again
	// once another leads (as its service manager would).
	StopPatroni FaultKind = "stop Patroni"
	// PausePrimary: SIGSTOP of the primary's Patroni and PostgreSQL (a
	// frozen VM) until another member leads, i.e. past the leader TTL, then
	// SIGCONT: the old primary wakes up still believing it leads.
	PausePrimary FaultKind = "SIGSTOP primary"
)

// PatroniMember is one member as GET /cluster reports it.
type PatroniMember struct {
	Name     string `json:"name"`
	Role     string `json:"role"`  // leader, sync_standby, replica
	State    string `json:"state"` // running, streaming, stopped, starting, crashed...
	Timeline int    `json:"timeline"`
	Lag      any    `json:"lag"`
}

// PatroniState is the cluster as one member's REST API reports it.
type PatroniState struct {
	Members []PatroniMember
	Leader  string // the member that holds the leader key and runs ("" none)
	Sync    int    // members with role sync_standby
	From    string // which member answered
}

var restClient = &http.Client{Timeout: time.Second}

// State asks the members' REST APIs in turn for GET /cluster.
func (p *Patroni) State(ctx context.Context) (PatroniState, error) {
	var last error
	for _, m := range p.Members {
		if !m.Running() {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/cluster", m.APIPort), nil)
		resp, err := restClient.Do(req)
		if err != nil {
			last = err
			continue
		}
		var st PatroniState
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		st.From = m.name
		for _, x := range st.Members {
			switch {
			case x.Role == "leader" && x.State == "running":
				st.Leader = x.Name
			case x.Role == "sync_standby":
				st.Sync++
			}
		}
		return st, nil
	}
	if last == nil {
		last = fmt.Errorf("no member's Patroni is running")
	}
	return PatroniState{}, last
}

func (st PatroniState) String() string {
	var parts []string
	for _, m := range st.Members {
		parts = append(parts, fmt.Sprintf("%s %s/%s tl%d lag %v", m.Name, m.Role, m.State, m.Timeline, m.Lag))
	}
	return strings.Join(parts, ", ") + " (from " + st.From + ")"
}

// WaitStable waits until a member leads and every other member streams
// from it with no lag (one of them synchronous, unless Async), and returns
// the leader.
func (p *Patroni) WaitStable(ctx context.Context, limit time.Duration) (*Member, error) {
	var st PatroniState
	err := p.waitFor(ctx, "a leader and two streaming replicas", limit, func(ctx context.Context) (bool, error) {
		var err error
		if st, err = p.State(ctx); err != nil || st.Leader == "" || len(st.Members) != len(p.Members) {
			return false, nil
		}
		tl := 0
		for _, m := range st.Members {
			if m.Name == st.Leader {
				tl = m.Timeline
			}
		}
		for _, m := range st.Members {
			if m.Name == st.Leader {
				continue
			}
			if lag, ok := m.Lag.(float64); !ok || lag > 0 || (m.State != "running" && m.State != "streaming") || m.Timeline != tl {
				return false, nil
			}
		}
		return p.Async || st.Sync == 1, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w (last: %s)", err, st)
	}
	return p.member(st.Leader), nil
}

func (p *Patroni) waitFor(ctx context.Context, what string, limit time.Duration, cond func(context.Context) (bool, error)) error {
	f := Formation{}
	return f.waitFor(ctx, what, limit, cond)
}

// Switchover asks the leader's REST API for a switchover (what
// `patronictl switchover --force` does).
func (p *Patroni) Switchover(ctx context.Context, leader *Member) (time.Time, error) {
	body, _ := json.Marshal(map[string]string{"leader": leader.name})
	req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("http://127.0.0.1:%d/switchover", leader.APIPort), bytes.NewReader(body))
	at := time.Now()
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return at, err
	}
	defer resp.Body.Close()
	var msg bytes.Buffer
	_, _ = msg.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		return at, fmt.Errorf("ha: POST /switchover: %s: %s", resp.Status, msg.String())
	}
	return at, nil
}

// pgProcs are m's postmaster and its children.
func (m *Member) pgProcs() ([]int, error) {
	pm, err := m.PostmasterPID()
	if err != nil {
		return nil, err
	}
	pids := []int{pm}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) >= 2 && fields[1] == strconv.Itoa(pm) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// pause stops (SIGSTOP) m's Patroni and PostgreSQL; the returned function
// resumes them.
func (m *Member) pause() (resume func(), err error) {
	pids, err := m.pgProcs()
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	pg := m.cmd.Process.Pid
	m.mu.Unlock()
	if err := syscall.Kill(-pg, syscall.SIGSTOP); err != nil {
		return nil, err
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	return func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		_ = syscall.Kill(-pg, syscall.SIGCONT)
	}, nil
}

// fault is the Patroni part of a fault (see Cluster).
func (p *Patroni) fault(ctx context.Context, r *runner, i int, kind FaultKind, fr *FaultResult, before func()) error {
	primary, err := p.WaitStable(ctx, r.o.StableTimeout)
	if err != nil {
		return fmt.Errorf("before fault %d (%s): %w", i+1, kind, err)
	}
	fr.Node = primary.name
	before()
	var resume func()
	switch kind {
	case KillPostmaster:
		var pid int
		if pid, err = primary.PostmasterPID(); err == nil {
			fr.At = time.Now()
			err = syscall.Kill(pid, syscall.SIGKILL)
		}
	case Switchover:
		fr.At, err = p.Switchover(ctx, primary)
	case StopPatroni:
		fr.At = time.Now()
		go primary.stop(syscall.SIGTERM, time.Minute)
	case PausePrimary:
		fr.At = time.Now()
		resume, err = primary.pause()
	default:
		err = fmt.Errorf("unknown fault %q", kind)
	}
	if err != nil {
		return fmt.Errorf("fault %d (%s): %w", i+1, kind, err)
	}
	r.o.Logf("fault %d: %s on %s (primary)", i+1, kind, primary.name)
	// Promotion: another member holds the leader key and runs. A killed
	// postmaster may instead be restarted in place (primary_start_timeout
	// > 0): the fault then ends once it leads again and the TTL has passed.
	var st PatroniState
	err = p.waitFor(ctx, "another member leading", r.o.StableTimeout, func(ctx context.Context) (bool, error) {
		if st, err = p.State(ctx); err != nil {
			return false, nil
		}
		if st.Leader != "" && st.Leader != primary.name {
			return true, nil
		}
		return kind == KillPostmaster && st.Leader == primary.name &&
			time.Since(fr.At) > time.Duration(p.Settings.TTL+p.Settings.PrimaryStartTimeout+p.Settings.LoopWait)*time.Second, nil
	})
	if resume != nil {
		resume()
	}
	if err != nil {
		return fmt.Errorf("fault %d (%s): %w (last: %s)", i+1, kind, err, st)
	}
	if st.Leader != primary.name {
		fr.Promoted = time.Since(fr.At)
		r.o.Logf("fault %d: %s leads after %v", i+1, st.Leader, fr.Promoted.Round(time.Millisecond))
	} else {
		fr.InPlace = true
		r.o.Logf("fault %d: %s restarted in place; no failover", i+1, primary.name)
	}
	if kind == StopPatroni {
		primary.stop(syscall.SIGTERM, time.Minute) // waits for the exit
		primary.killPostmaster()
		if err := p.start(&primary.proc); err != nil {
			return err
		}
	}
	if err := p.waitHealed(ctx, r, i, fr); err != nil {
		return fmt.Errorf("after fault %d (%s): %w", i+1, kind, err)
	}
	fr.Stable = time.Since(fr.At)
	return nil
}

// stuckAfter is how long a running replica may lag before waitHealed
// reinitializes it.
const stuckAfter = 45 * time.Second

// waitHealed waits for WaitStable. A replica that runs but stays behind
// for stuckAfter is reinitialized from the leader (POST /reinitialize,
// what `patronictl reinit` does), as an operator would: seen after a
// SIGSTOP of the primary on a loaded machine, when the promoted member
// lost the leader key again (it demoted itself) and the resumed old
// primary took it back; the member left on the newer timeline streams
// nothing ("highest timeline N of the primary is behind recovery timeline
// N+1") and Patroni 3.0 does not rewind a running replica. Acknowledged
// locks are not at stake (that member had no synchronous standby on its
// timeline); the fault's Note says it happened.
func (p *Patroni) waitHealed(ctx context.Context, r *runner, i int, fr *FaultResult) error {
	since := map[string]time.Time{}
	reinit := map[string]bool{}
	deadline := time.Now().Add(r.o.StableTimeout)
	for {
		if _, err := p.WaitStable(ctx, 5*time.Second); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return err
		}
		st, err := p.State(ctx)
		if err != nil || st.Leader == "" {
			continue
		}
		for _, m := range st.Members {
			lag, ok := m.Lag.(float64)
			if m.Name == st.Leader || m.State != "running" && m.State != "streaming" || ok && lag == 0 {
				delete(since, m.Name)
				continue
			}
			if since[m.Name].IsZero() {
				since[m.Name] = time.Now()
			}
			if time.Since(since[m.Name]) < stuckAfter || reinit[m.Name] {
				continue
			}
			reinit[m.Name] = true
			note := fmt.Sprintf("%s stuck behind the leader %s for %v (%s): reinitialized", m.Name, st.Leader, stuckAfter, st)
			r.o.Logf("fault %d: %s", i+1, note)
			fr.Note = note
			if err := p.reinit(ctx, p.member(m.Name)); err != nil {
				return err
			}
		}
	}
}

// reinit asks m's Patroni to take a fresh copy of the leader.
func (p *Patroni) reinit(ctx context.Context, m *Member) error {
	req, _ := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("http://127.0.0.1:%d/reinitialize", m.APIPort),
		strings.NewReader(`{"force": true}`))
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var msg bytes.Buffer
	_, _ = msg.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("ha: POST /reinitialize on %s: %s: %s", m.name, resp.Status, msg.String())
	}
	return nil
}
