// Command syncguard runs commands under a distributed lock with a fencing
// token, and inspects and sets up syncguard's lock tables in PostgreSQL.
//
//	syncguard run --key jobs:nightly-report -- ./report.sh
//	syncguard status jobs:nightly-report
//	syncguard ls
//	syncguard doctor
//
// Install it from a checkout of the repository with
//
//	cd cmd/syncguard && go install .
//
// (`go install github.com/syncguard/syncguard-go/cmd/syncguard@VERSION` works
// once the modules are tagged and this module's go.mod has no replace
// directives; see docs/cli.md.)
//
// Every command, flag and exit status is documented in docs/cli.md of the
// repository, and by `syncguard help`.
package main

import (
	"os"

	"github.com/syncguard/syncguard-go/cmd/syncguard/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
