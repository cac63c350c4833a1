module github.com/syncguard/syncguard-go/tools/release

go 1.26.0

require golang.org/x/mod v0.35.0
