package doctor_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/doctor"
	"github.com/syncguard/syncguard-go/syncguard"
)

func TestCheckRejectsBadInputBeforeIO(t *testing.T) {
	if _, err := doctor.Check(context.Background(), nil, nil); !errors.Is(err, syncguard.ErrInvalidArgument) {
		t.Errorf("nil db: %v", err)
	}
	if _, err := doctor.Check(context.Background(), &sql.DB{}, &syncguard.Config{TableName: "bad-name"}); !errors.Is(err, syncguard.ErrInvalidArgument) {
		t.Errorf("bad table name: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := doctor.Check(ctx, &sql.DB{}, nil); !errors.Is(err, syncguard.ErrAborted) {
		t.Errorf("cancelled context: %v", err)
	}
}

func TestReportErr(t *testing.T) {
	r := doctor.Report{Findings: []doctor.Finding{{Check: "a", Status: "ok"}, {Check: "b", Status: "warn"}}}
	if !r.OK() || r.Err() != nil {
		t.Errorf("warnings only: OK %v, Err %v", r.OK(), r.Err())
	}
	r.Findings = append(r.Findings, doctor.Finding{Check: "lock table privileges", Status: "fail", Detail: "role app lacks DELETE"})
	err := r.Err()
	if r.OK() || err == nil || !strings.Contains(err.Error(), "lock table privileges: role app lacks DELETE") || !errors.Is(err, syncguard.ErrInternal) {
		t.Errorf("a failed check: OK %v, Err %v", r.OK(), err)
	}
}

// A Finding's JSON is what `syncguard doctor --json` prints for a check:
// lower-case names, no fix when there is none.
func TestFindingJSON(t *testing.T) {
	for f, want := range map[doctor.Finding]string{
		{Check: "fsync", Status: "warn", Detail: "off", Fix: "fsync = on"}: `{"check":"fsync","status":"warn","detail":"off","fix":"fsync = on"}`,
		{Check: "clock", Status: "ok", Detail: "in sync"}:                  `{"check":"clock","status":"ok","detail":"in sync"}`,
	} {
		if got, err := json.Marshal(f); err != nil || string(got) != want {
			t.Errorf("json.Marshal(%+v) = %s, %v; want %s", f, got, err, want)
		}
	}
}
