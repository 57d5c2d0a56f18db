package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Accelerator manufacturers with behaviour of their own.
const (
	ManufacturerNVIDIA = "nvidia"
	ManufacturerAscend = "ascend"
)

// InstanceTypeSpec describes a class of nodes.
type InstanceTypeSpec struct {
	// NodeSelector of the nodes of this type.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations the Pods placed here need.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Accelerator the nodes carry.
	// +optional
	Accelerator *Accelerator `json:"accelerator,omitempty"`
	// CPUPerAccelerator is requested per accelerator a replica asks for.
	// +optional
	CPUPerAccelerator *resource.Quantity `json:"cpuPerAccelerator,omitempty"`
	// MemoryPerAccelerator is requested per accelerator a replica asks for.
	// +optional
	MemoryPerAccelerator *resource.Quantity `json:"memoryPerAccelerator,omitempty"`
}

// Accelerator is a device-plugin resource and who makes it.
type Accelerator struct {
	// ResourceName of the device plugin, e.g. nvidia.com/gpu or huawei.com/Ascend910.
	// +kubebuilder:validation:MinLength=1
	ResourceName string `json:"resourceName"`
	// Manufacturer: nvidia, ascend, ... An ascend accelerator runs vLLM as vLLM-Ascend.
	// +kubebuilder:validation:MinLength=1
	Manufacturer string `json:"manufacturer"`
}

// InstanceTypeStatus is observed.
type InstanceTypeStatus struct {
	// Conditions of the instance type.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// InstanceType is a named class of nodes that ModelDeployment roles run on.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=it,categories=kvcache
// +kubebuilder:printcolumn:name="Accelerator",type=string,JSONPath=`.spec.accelerator.resourceName`
// +kubebuilder:printcolumn:name="Manufacturer",type=string,JSONPath=`.spec.accelerator.manufacturer`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type InstanceType struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec describes the nodes.
	Spec InstanceTypeSpec `json:"spec"`
	// Status is observed.
	// +optional
	Status InstanceTypeStatus `json:"status,omitempty"`
}

// InstanceTypeList is a list of InstanceTypes.
// +kubebuilder:object:root=true
type InstanceTypeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InstanceType `json:"items"`
}
