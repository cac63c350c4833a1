module github.com/syncguard/syncguard-go/pq

go 1.26.0

replace (
	github.com/syncguard/syncguard-go => ../
	github.com/syncguard/syncguard-go/internal/pgtest => ../internal/pgtest
)

require (
	github.com/lib/pq v1.12.3
	github.com/syncguard/syncguard-go v0.0.0-00010101000000-000000000000
)
