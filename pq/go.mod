module github.com/syncguard/syncguard-go/pq

go 1.25.0

require (
	github.com/lib/pq v1.12.3
	github.com/syncguard/syncguard-go v0.1.0
)
