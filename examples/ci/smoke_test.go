package ci

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/doctor"
	_ "github.com/syncguard/syncguard-go/pgxstd" // registers the "pgx" driver and its dialect
	"github.com/syncguard/syncguard-go/syncguard"
)

// A smoke test after a deployment, as the service's own database role:
// its tables, indexes and grants, and the server's settings.
func TestDeploymentSmoke(t *testing.T) {
	dsn := os.Getenv("APP_DATABASE_URL")
	if dsn == "" {
		t.Skip("APP_DATABASE_URL is not set")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	report, err := doctor.Check(ctx, db, &syncguard.Config{TableName: "app_locks", FenceTableName: "app_fences"})
	if err != nil {
		t.Fatal(err) // the database cannot be reached
	}
	for _, f := range report.Findings {
		t.Logf("%-22s %-4s %s", f.Check, f.Status, f.Detail)
		if f.Status != "ok" && f.Fix != "" {
			t.Logf("%22s fix: %s", "", f.Fix)
		}
	}
	if err := report.Err(); err != nil {
		t.Fatal(err)
	}
}
