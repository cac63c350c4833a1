package ci

import (
	"os"
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	_ "github.com/syncguard/syncguard-go/pgxstd" // registers the "pgx" driver and its dialect
)

// The suite against the database CI gives this job. Without the variable
// it skips locally and fails in CI (conformance.InCI).
func TestSyncGuardConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		DriverName: "pgx",
		DSN:        os.Getenv("SYNCGUARD_CONFORMANCE_DSN"),
	})
}
