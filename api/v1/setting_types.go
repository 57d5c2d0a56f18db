package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Setting catalog: the only names a Setting may have, and their defaults.
const (
	// SettingKVCacheBackendImage is the store image used when neither a member group nor the
	// backend names one.
	SettingKVCacheBackendImage = "kv-cache-backend-image"
	// SettingKVCacheDtypeOwned, while "true", makes injection and ModelDeployment write
	// --kv-cache-dtype from the Binding and refuse a container's own.
	SettingKVCacheDtypeOwned = "model-deployment-kv-cache-dtype-owned"

	// DefaultKVCacheBackendImage is this project's store build, which can elect a leader.
	DefaultKVCacheBackendImage = "gpustack/mirrored-mooncake:0.3.13.post1-cpu"
	// DefaultKVCacheDtypeOwned is the catalog default of SettingKVCacheDtypeOwned.
	DefaultKVCacheDtypeOwned = "true"
)

// DtypeOwned reads a value of SettingKVCacheDtypeOwned: owned unless "false"; "" (no such
// Setting) is the default, owned.
func DtypeOwned(value string) bool { return value != "false" }

// SettingCatalog lists every Setting name with its default value.
func SettingCatalog() map[string]string {
	return map[string]string{
		SettingKVCacheBackendImage: DefaultKVCacheBackendImage,
		SettingKVCacheDtypeOwned:   DefaultKVCacheDtypeOwned,
	}
}

// SettingSpec holds the value.
type SettingSpec struct {
	// Value of the setting.
	Value string `json:"value"`
}

// SettingStatus is observed.
type SettingStatus struct {
	// Conditions of the setting.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Setting is one cluster-wide value from a fixed catalog (kv-cache-backend-image,
// model-deployment-kv-cache-dtype-owned); the chart creates them.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=kvcache
// +kubebuilder:printcolumn:name="Value",type=string,JSONPath=`.spec.value`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Setting struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the value.
	Spec SettingSpec `json:"spec"`
	// Status is observed.
	// +optional
	Status SettingStatus `json:"status,omitempty"`
}

// SettingList is a list of Settings.
// +kubebuilder:object:root=true
type SettingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Setting `json:"items"`
}
