module github.com/syncguard/syncguard-go

go 1.25.0

require golang.org/x/text v0.41.0

require github.com/DATA-DOG/go-sqlmock v1.5.2
