module github.com/syncguard/syncguard-go/tools/genschema

go 1.25.0

require github.com/syncguard/syncguard-go v0.1.0
