// Command syncguard runs commands under a distributed lock with a fencing
// token, and inspects and sets up syncguard's lock tables in PostgreSQL.
//
//	syncguard run --key jobs:nightly-report -- ./report.sh
//	syncguard status jobs:nightly-report
//	syncguard ls
//	syncguard doctor
//
// Installing it, and every command, flag and exit status: docs/cli.md of
// the repository, and `syncguard help`.
package main

import (
	"os"

	"github.com/syncguard/syncguard-go/cmd/syncguard/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
