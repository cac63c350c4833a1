package deploy

import (
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/internal/replication"
	"github.com/syncguard/syncguard-go/internal/rules"
)

// replication reports the primary, its standbys and whether an acquire's
// commit waits for them (internal/replication, the home of these rules;
// docs/ha.md).
func (d *deployment) replication() {
	st, err := replication.Read(d.ctx, d.q)
	if err != nil {
		d.couldNot(replication.CheckStandbys, err)
		return
	}
	for _, f := range st.Findings() {
		d.add(f.Check, string(f.Severity), f.Detail, f.Fix)
	}
}

func (d *deployment) durability() {
	var syncCommit, fsync string
	if err := d.row(`SELECT current_setting('synchronous_commit'), current_setting('fsync')`, nil, &syncCommit, &fsync); err != nil {
		d.couldNot("synchronous_commit", err)
		return
	}
	if syncCommit == "off" {
		d.add("synchronous_commit", Fail,
			"off (as this session sees it): a server crash can lose acquires that were already reported, and hand out their fences again",
			fmt.Sprintf("ALTER ROLE %s SET synchronous_commit = on;  (or set it in postgresql.conf, and keep it out of the applications' connection strings)", d.role()))
	} else {
		d.add("synchronous_commit", OK, syncCommit, "")
	}
	if fsync == "off" {
		d.add("fsync", Fail,
			"off: a crash of the server machine can lose committed acquires and hand out their fences again",
			"set fsync = on in postgresql.conf and reload")
	} else {
		d.add("fsync", OK, fsync, "")
	}
}

// clockWarn: beyond this offset, expiry times compared with the local
// clock mislead (locks stay correct: only the server's clock decides).
const clockWarn = rules.ToleranceMs * time.Millisecond

func (d *deployment) clock() {
	var best, bestRTT time.Duration = 0, -1
	for range 3 {
		var ms int64
		t0 := time.Now()
		if err := d.row(`SELECT `+rules.NowMsSQL, nil, &ms); err != nil {
			d.couldNot("clock", err)
			return
		}
		rtt := time.Since(t0)
		if bestRTT < 0 || rtt < bestRTT {
			mid := t0.Add(rtt / 2)
			best, bestRTT = time.UnixMilli(ms).Sub(mid.Truncate(time.Millisecond)), rtt
		}
	}
	off, dir := best, "ahead of"
	if off < 0 {
		off, dir = -off, "behind"
	}
	detail := fmt.Sprintf("server clock is %v %s this machine's (±%v)", off.Round(time.Millisecond), dir, (bestRTT/2 + time.Millisecond).Round(time.Millisecond))
	if off > clockWarn+bestRTT/2 {
		d.add("clock", Warn, detail+": locks stay correct (only the server's clock decides expiry), but expiry times compared with this machine's clock are off by as much",
			"synchronize both clocks with NTP (chrony, systemd-timesyncd)")
		return
	}
	d.add("clock", OK, detail, "")
}
