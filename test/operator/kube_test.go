package operator_test

import (
	"os"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func envtestAdmin() envtest.User {
	return envtest.User{Name: "kvcache-test-admin", Groups: []string{"system:masters"}}
}

func writeFile(p string, b []byte) error { return os.WriteFile(p, b, 0o600) }
