package ha

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// NodeState is one node as the monitor sees it.
type NodeState struct {
	Name     string
	Port     int
	Reported string // reportedstate
	Goal     string // goalstate
	Health   int    // health (1 good, 0 bad, -1 unknown)
	Running  bool   // reportedpgisrunning
}

// State reads the nodes' states from the monitor.
func (f *Formation) State(ctx context.Context) ([]NodeState, error) {
	rows, err := f.mon.QueryContext(ctx, `SELECT nodename, nodeport, reportedstate::text, goalstate::text, health, reportedpgisrunning
		FROM pgautofailover.node ORDER BY nodeid`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []NodeState
	for rows.Next() {
		var s NodeState
		if err := rows.Scan(&s.Name, &s.Port, &s.Reported, &s.Goal, &s.Health, &s.Running); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func formatStates(ss []NodeState) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = fmt.Sprintf("%s %s->%s", s.Name, s.Reported, s.Goal)
	}
	return strings.Join(parts, ", ")
}

// waitStates waits until every named node reports and is assigned the
// given state.
func (f *Formation) waitStates(ctx context.Context, limit time.Duration, want map[string]string) error {
	var last []NodeState
	err := f.waitFor(ctx, fmt.Sprintf("states %v", want), limit, func(ctx context.Context) (bool, error) {
		ss, err := f.State(ctx)
		if err != nil {
			return false, nil
		}
		last = ss
		n := 0
		for _, s := range ss {
			if w, ok := want[s.Name]; ok && s.Reported == w && s.Goal == w {
				n++
			}
		}
		return n == len(want), nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)", err, formatStates(last))
	}
	return nil
}

// WaitStable waits until one node is primary and the other secondary
// (reported and assigned), and returns the primary.
func (f *Formation) WaitStable(ctx context.Context, limit time.Duration) (*Node, error) {
	var primary *Node
	var last []NodeState
	err := f.waitFor(ctx, "a primary and a secondary", limit, func(ctx context.Context) (bool, error) {
		ss, err := f.State(ctx)
		if err != nil {
			return false, nil
		}
		last = ss
		var p, s int
		name := ""
		for _, st := range ss {
			switch {
			case st.Reported == "primary" && st.Goal == "primary":
				p++
				name = st.Name
			case st.Reported == "secondary" && st.Goal == "secondary":
				s++
			}
		}
		if p == 1 && s == len(ss)-1 {
			primary = f.node(name)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w (last: %s)", err, formatStates(last))
	}
	return primary, nil
}

func (f *Formation) node(name string) *Node {
	for _, n := range f.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Other returns the node that is not n.
func (f *Formation) Other(n *Node) *Node {
	if f.Nodes[0] == n {
		return f.Nodes[1]
	}
	return f.Nodes[0]
}

func (f *Formation) waitFor(ctx context.Context, what string, limit time.Duration, cond func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		ok, err := cond(cctx)
		cancel()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("ha: waiting for %s: %w", what, ctx.Err())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ha: %s not reached within %v", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Events returns the monitor's last n events, oldest first.
func (f *Formation) Events(ctx context.Context, n int) ([]string, error) {
	rows, err := f.mon.QueryContext(ctx, `SELECT to_char(eventtime, 'HH24:MI:SS.MS'), nodename, reportedstate::text, goalstate::text, description
		FROM (SELECT * FROM pgautofailover.event ORDER BY eventid DESC LIMIT $1) e ORDER BY eventid`, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var at, name, rep, goal, desc string
		if err := rows.Scan(&at, &name, &rep, &goal, &desc); err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprintf("%s %s %s->%s: %s", at, name, rep, goal, desc))
	}
	return out, rows.Err()
}
