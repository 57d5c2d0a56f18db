// Package integration runs this project's API against a real kube-apiserver and etcd: the
// generated CRDs install, their schema defaults and CEL rules hold, and Go's defaulting mirrors
// the server's.
package integration
