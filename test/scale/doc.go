// Package scale holds BenchmarkScale, the operator's scale run: 100 KVCacheBackends, 100 pools
// and 1000 Bindings against envtest with the manager as a separate process, measuring the time
// to settle, the API writes per resync in steady state (from the API server's audit log), the
// writes per resync while every tenant's usage moves every second (real traffic, fake masters),
// and the manager's RSS with 10,000 unlabelled Pods in the cluster. It is a benchmark only, so
// `go test ./...` runs nothing here:
//
//	KUBEBUILDER_ASSETS=$(hack/tools.sh assets) go test ./test/scale/ -run '^$' -bench Scale -benchtime 1x -v -timeout 20m
package scale
