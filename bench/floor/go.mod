module github.com/presenced/presenced/bench/floor

go 1.26.0

require (
	github.com/gorilla/websocket v1.5.3
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
