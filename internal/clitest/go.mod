module github.com/syncguard/syncguard-go/internal/clitest

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/syncguard/syncguard-go v0.1.0
	github.com/syncguard/syncguard-go/internal/pgtest v0.1.0
	github.com/syncguard/syncguard-go/pgxstd v0.1.0
)
