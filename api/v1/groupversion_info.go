// Package v1 holds the worker.gpustack.ai/v1 API of kvcache-operator: the KV cache store
// (KVCacheBackend), its quota'd pools and namespace grants (KVCachePool, KVCachePoolBinding),
// managed engine workloads (ModelDeployment, InstanceType) and the cluster Settings catalog.
//
// The Go doc comments on every field become `kubectl explain`; kubebuilder markers become the
// CRD schema (`make generate`). Defaults declared in markers are mirrored by the Default
// functions in defaults.go, so objects read from files (the CLI) behave like objects the API
// server defaulted.
//
// +kubebuilder:object:generate=true
// +groupName=worker.gpustack.ai
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every kind in this package.
var GroupVersion = schema.GroupVersion{Group: "worker.gpustack.ai", Version: "v1"}

var (
	// SchemeBuilder registers this package's kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&KVCacheBackend{}, &KVCacheBackendList{},
		&KVCachePool{}, &KVCachePoolList{},
		&KVCachePoolBinding{}, &KVCachePoolBindingList{},
		&ModelDeployment{}, &ModelDeploymentList{},
		&InstanceType{}, &InstanceTypeList{},
		&Setting{}, &SettingList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
