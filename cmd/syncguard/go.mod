module github.com/syncguard/syncguard-go/cmd/syncguard

go 1.26.0

replace (
	github.com/syncguard/syncguard-go => ../../
	github.com/syncguard/syncguard-go/internal/pgtest => ../../internal/pgtest
	github.com/syncguard/syncguard-go/pgxstd => ../../pgxstd
	github.com/syncguard/syncguard-go/pq => ../../pq
)
