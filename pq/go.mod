module github.com/syncguard/syncguard-go/pq

go 1.26.0

require (
	github.com/lib/pq v1.12.3
	github.com/syncguard/syncguard-go v0.1.0
)

require golang.org/x/text v0.44.0 // indirect
