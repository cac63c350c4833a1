module github.com/syncguard/syncguard-go/bench

go 1.26.0

replace (
	github.com/syncguard/syncguard-go => ../
	github.com/syncguard/syncguard-go/internal/pgtest => ../internal/pgtest
	github.com/syncguard/syncguard-go/pgxstd => ../pgxstd
	github.com/syncguard/syncguard-go/pq => ../pq
)

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/lib/pq v1.12.3
	github.com/syncguard/syncguard-go v0.0.0-00010101000000-000000000000
	github.com/syncguard/syncguard-go/internal/pgtest v0.0.0-00010101000000-000000000000
	github.com/syncguard/syncguard-go/pgxstd v0.0.0-00010101000000-000000000000
	github.com/syncguard/syncguard-go/pq v0.0.0-00010101000000-000000000000
)
