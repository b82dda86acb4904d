module github.com/lanes-dev/lanes

go 1.26.8

require (
	github.com/google/uuid v1.6.0
	go.uber.org/goleak v1.3.0
)

require github.com/stretchr/testify v1.12.1 // indirect
