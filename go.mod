module github.com/backstophq/backstop

go 1.25

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
)
