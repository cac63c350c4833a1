// Command genschema writes schema.sql at the repository root: the DDL that
// syncguard.SetupSchema runs with the default table names, for migration
// tools. Run it with `go generate ./syncguard` (or `make schema`); a unit
// test fails when the file is stale.
package main

import (
	"log"
	"os"

	"github.com/syncguard/syncguard-go/syncguard"
)

func main() {
	ddl, err := syncguard.SchemaSQL(nil)
	if err != nil {
		log.Fatal(err)
	}
	out := "schema.sql"
	if len(os.Args) > 1 {
		out = os.Args[1]
	}
	if err := os.WriteFile(out, []byte(ddl), 0o644); err != nil {
		log.Fatal(err)
	}
}
