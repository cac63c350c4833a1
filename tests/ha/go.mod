module github.com/syncguard/syncguard-go/tests/ha

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/lib/pq v1.12.3
	github.com/syncguard/syncguard-go v0.1.0
	github.com/syncguard/syncguard-go/cmd/syncguard v0.1.0
	github.com/syncguard/syncguard-go/tests/pgtest v0.1.0
	github.com/syncguard/syncguard-go/pgxstd v0.1.0
	github.com/syncguard/syncguard-go/pq v0.1.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)
