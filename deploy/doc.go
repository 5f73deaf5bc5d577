// Package deploy holds no code: its tests check what deploy/ ships (the Helm
// chart, the Prometheus rules and the Grafana dashboard) with the real tools
// and against a running server. It is a module of its own, so the
// Kubernetes API types never enter the server's.
package deploy
