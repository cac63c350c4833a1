// Package replication checks whether a PostgreSQL deployment keeps
// acknowledged locks across a failover: connected to a primary, which
// standbys stream from it, and whether the commit that acknowledges an
// acquire waits for them. It is the one home of these rules, used by
// `syncguard doctor` (and by doctor.Check); docs/ha.md explains
// them.
//
// What it cannot see: replication below PostgreSQL (storage-level
// replication of managed services such as Multi-AZ block devices) and
// standbys of a failover manager that are not connected right now. A
// deployment with no visible standby is reported as such, with what to ask
// of the platform.
package replication

import (
	"context"
	"fmt"
	"strings"

	"github.com/syncguard/syncguard-go/internal/pooler"
)

// Standby is one walsender of pg_stat_replication.
type Standby struct {
	Name      string // application_name
	State     string // "streaming", "catchup", ...; "" when not visible to the role
	SyncState string // "sync", "quorum", "potential", "async"; "" when not visible
}

// Synchronous reports whether commits can wait for this standby.
func (s Standby) Synchronous() bool { return s.SyncState == "sync" || s.SyncState == "quorum" }

// Status is what the checks read from the server, as the checking
// session sees it.
type Status struct {
	InRecovery              bool   // pg_is_in_recovery(): a standby
	SynchronousCommit       string // current_setting('synchronous_commit')
	SynchronousStandbyNames string // current_setting('synchronous_standby_names')
	Standbys                []Standby
}

// Read reads Status through db, a *sql.DB or db sending its statements
// unprepared (pooler.Unprepared), as any role: without pg_read_all_stats
// the standbys' state columns read as unknown.
func Read(ctx context.Context, db pooler.Querier) (Status, error) {
	var s Status
	err := pooler.QueryRow(ctx, db, `SELECT pg_is_in_recovery(), current_setting('synchronous_commit'), current_setting('synchronous_standby_names')`, nil,
		&s.InRecovery, &s.SynchronousCommit, &s.SynchronousStandbyNames)
	if err != nil {
		return s, err
	}
	if s.InRecovery {
		return s, nil
	}
	// Physical walsenders only: a logical replication slot's consumer is no
	// failover target. pg_basebackup's walsenders show state "backup".
	rows, err := db.QueryContext(ctx, `SELECT coalesce(r.application_name, ''), coalesce(r.state, ''), coalesce(r.sync_state, '')
		FROM pg_stat_replication r
		WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_type = 'logical')
		  AND r.state IS DISTINCT FROM 'backup'
		ORDER BY 1`)
	if err != nil {
		return s, err
	}
	defer rows.Close()
	for rows.Next() {
		var st Standby
		if err := rows.Scan(&st.Name, &st.State, &st.SyncState); err != nil {
			return s, err
		}
		s.Standbys = append(s.Standbys, st)
	}
	return s, rows.Err()
}

// Severity of a Finding.
type Severity string

const (
	OK   Severity = "ok"
	Warn Severity = "warn"
	Fail Severity = "fail"
)

// Finding is one check's result.
type Finding struct {
	Check    string
	Severity Severity
	Detail   string
	Fix      string // what to change, naming the exact setting; "" when OK
}

// Check names.
const (
	CheckPrimary  = "primary"
	CheckStandbys = "replication"
	CheckCommit   = "synchronous commit"
)

// waitsForStandby: the synchronous_commit levels at which a commit on a
// primary with synchronous standbys returns only once a standby has it.
// remote_write means the standby's OS has it (lost only if the standby's
// machine crashes together with the primary).
func waitsForStandby(level string) bool {
	switch level {
	case "on", "remote_apply", "remote_write":
		return true
	}
	return false
}

// Findings judges s.
func (s Status) Findings() []Finding {
	if s.InRecovery {
		return []Finding{{Check: CheckPrimary, Severity: Fail,
			Detail: "connected to a standby (read-only): every acquire, extend and release fails with SQLSTATE 25006",
			Fix:    "connect to the primary: list every node in the connection string with target_session_attrs=read-write (host=a,b port=5432,5432 target_session_attrs=read-write)"}}
	}
	out := []Finding{{Check: CheckPrimary, Severity: OK, Detail: "connected to a primary (read-write)"}}
	names := strings.TrimSpace(s.SynchronousStandbyNames)
	var sync, async, unknown []string
	for _, st := range s.Standbys {
		label := st.Name
		if label == "" {
			label = "(unnamed)"
		}
		switch {
		case st.SyncState == "":
			unknown = append(unknown, label)
		case st.Synchronous():
			sync = append(sync, label)
		default:
			async = append(async, label+" ("+st.SyncState+")")
		}
	}
	standbyFix := "make the commit wait for a standby: synchronous_standby_names = 'ANY 1 (<standby application_names>)' " +
		"with synchronous_commit = on (or remote_apply); pg_auto_failover: pg_autoctl set node replication-quorum true on the standbys " +
		"(and pg_autoctl set formation number-sync-standbys 1 with three or more nodes); Patroni: synchronous_mode: true " +
		"(and synchronous_mode_strict: true to refuse writes without a synchronous standby). See docs/ha.md"
	switch {
	case len(s.Standbys) == 0 && names == "":
		out = append(out, Finding{Check: CheckStandbys, Severity: OK,
			Detail: "no streaming standby connected: a single server, whose crashes keep acknowledged locks through synchronous_commit and fsync. " +
				"If a failover manager or managed service can promote a replica not listed in pg_stat_replication, it must not lose acknowledged commits (docs/ha.md)"})
	case len(s.Standbys) == 0:
		out = append(out, Finding{Check: CheckStandbys, Severity: Warn,
			Detail: fmt.Sprintf("synchronous_standby_names = '%s' but no standby is connected: commits (every acquire, extend and release) wait until one connects", names),
			Fix:    "start or reconnect the standby, or let the failover manager clear synchronous_standby_names while it is gone (pg_auto_failover's wait_primary state does)"})
	case names == "":
		out = append(out, Finding{Check: CheckStandbys, Severity: Warn,
			Detail: fmt.Sprintf("%d standby(s) replicate asynchronously (synchronous_standby_names is empty): %s. "+
				"An acquire or extend is acknowledged before any standby has it; a failover to one of them can lose it and hand the same fence out again",
				len(s.Standbys), strings.Join(append(async, unknown...), ", ")),
			Fix: "set synchronous_standby_names; " + standbyFix})
	case len(sync) == 0 && len(unknown) == 0:
		out = append(out, Finding{Check: CheckStandbys, Severity: Warn,
			Detail: fmt.Sprintf("synchronous_standby_names = '%s' matches none of the connected standbys (%s): commits wait until a matching one connects, and a failover to these can lose acknowledged locks",
				names, strings.Join(async, ", ")),
			Fix: "list the standbys' application_name in synchronous_standby_names; " + standbyFix})
	default:
		detail := fmt.Sprintf("synchronous_standby_names = '%s'; synchronous: %s", names, orNone(sync))
		if len(async) > 0 {
			detail += "; asynchronous: " + strings.Join(async, ", ") + " (never promote these without checking they have every commit)"
		}
		if len(unknown) > 0 {
			detail += "; state not visible to this role (grant pg_read_all_stats to see it): " + strings.Join(unknown, ", ")
		}
		out = append(out, Finding{Check: CheckStandbys, Severity: OK, Detail: detail})
	}
	if len(s.Standbys) > 0 || names != "" {
		if waitsForStandby(s.SynchronousCommit) {
			out = append(out, Finding{Check: CheckCommit, Severity: OK,
				Detail: fmt.Sprintf("synchronous_commit = %s: a commit returns once a synchronous standby has it", s.SynchronousCommit)})
		} else {
			out = append(out, Finding{Check: CheckCommit, Severity: Warn,
				Detail: fmt.Sprintf("synchronous_commit = %s (as this session sees it): commits do not wait for the standbys, so a failover can lose acquires and extends already acknowledged and hand their fences out again",
					s.SynchronousCommit),
				Fix: "set synchronous_commit = on (or remote_apply) for the role or database the lock service uses, e.g. ALTER ROLE <role> SET synchronous_commit = on, and keep it out of connection strings"})
		}
	}
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none visible"
	}
	return strings.Join(s, ", ")
}
