package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EngineName is a managed inference engine.
// +kubebuilder:validation:Enum=vLLM;SGLang
type EngineName string

// Engines a ModelDeployment can run. vLLM on an ascend InstanceType runs vLLM-Ascend.
const (
	EngineVLLM   EngineName = "vLLM"
	EngineSGLang EngineName = "SGLang"
)

// RoleKind is what a role serves.
// +kubebuilder:validation:Enum=Server;Prefill;Decode
type RoleKind string

// Role kinds. Server is a plain server; Prefill and Decode are the halves of a split.
const (
	RoleServer  RoleKind = "Server"
	RolePrefill RoleKind = "Prefill"
	RoleDecode  RoleKind = "Decode"
)

// ModelDeploymentSpec declares a managed engine deployment.
type ModelDeploymentSpec struct {
	// Model to serve.
	Model Model `json:"model"`

	// Engine that serves it; its version decides the bundled store client.
	Engine Engine `json:"engine"`

	// KVCache attaches the roles to a shared cache through a KVCachePoolBinding in this
	// namespace. Omit it to run with no shared cache.
	// +optional
	KVCache *KVCacheAttachment `json:"kvCache,omitempty"`

	// Roles are the workloads rendered: one Deployment and Service per role.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	Roles []Role `json:"roles"`
}

// Model names the model weights.
type Model struct {
	// Name of the model, e.g. Qwen/Qwen2.5-7B-Instruct.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// Engine selects the inference engine.
type Engine struct {
	// Name of the engine: vLLM or SGLang.
	Name EngineName `json:"name"`
	// Version of the engine, e.g. 0.29.0; selects the default image.
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`
}

// KVCacheAttachment names the Binding a deployment attaches through.
type KVCacheAttachment struct {
	// PoolRef names a KVCachePoolBinding in this namespace (not a pool: the Binding is the
	// grant).
	PoolRef LocalReference `json:"poolRef"`
}

// Role is one workload of a deployment.
type Role struct {
	// Name of the role; the Deployment is <deployment>-<role>.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Kind of the role: Server (default), Prefill or Decode.
	// +kubebuilder:default=Server
	// +optional
	Kind RoleKind `json:"kind,omitempty"`
	// Replicas of the role.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// InstanceType names the InstanceType the role's Pods run on.
	// +optional
	InstanceType string `json:"instanceType,omitempty"`
	// Resources of each replica.
	// +optional
	Resources RoleResources `json:"resources,omitempty"`
	// ExtraArgs are appended to the engine's arguments. Flags the cache attachment owns are
	// refused.
	// +optional
	// +listType=atomic
	ExtraArgs []string `json:"extraArgs,omitempty"`
	// Env is added to the engine container. Variables the cache attachment owns are refused.
	// +optional
	// +listType=atomic
	Env []corev1.EnvVar `json:"env,omitempty"`
	// Image overrides the engine image derived from the engine name and version.
	// +optional
	Image string `json:"image,omitempty"`
}

// RoleResources are per-replica device counts.
type RoleResources struct {
	// Accelerator devices per replica, of the InstanceType's accelerator resource.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Accelerator int32 `json:"accelerator,omitempty"`
	// Interface is the number of fabric devices (RDMA or EFA, by the pool's transport) per
	// replica.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Interface int32 `json:"interface,omitempty"`
}

// ModelDeploymentCacheStatus echoes the Binding a deployment is attached through.
type ModelDeploymentCacheStatus struct {
	// Binding the deployment is attached through.
	// +optional
	Binding string `json:"binding,omitempty"`
	// Pool of the Binding.
	// +optional
	Pool string `json:"pool,omitempty"`
	// Domain of the Binding.
	// +optional
	Domain string `json:"domain,omitempty"`
}

// ModelDeploymentStatus is observed.
type ModelDeploymentStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase summarises the conditions.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Conditions: CacheAttached, RolloutComplete.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// KVCache echoes the Binding, pool and domain in use.
	// +optional
	KVCache *ModelDeploymentCacheStatus `json:"kvCache,omitempty"`
	// Roles summarises the roles, e.g. 2S or 1P2D.
	// +optional
	Roles string `json:"roles,omitempty"`
	// StoreHits is how much of what this deployment's engines were asked the store served,
	// from their own counters (see KVCachePoolBinding's).
	// +optional
	StoreHits *StoreHits `json:"storeHits,omitempty"`
}

// ModelDeployment is a managed engine deployment whose roles get the same cache configuration
// Pod injection writes, at render time.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=md,categories=kvcache
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.spec.engine.name`
// +kubebuilder:printcolumn:name="Roles",type=string,JSONPath=`.status.roles`
// +kubebuilder:printcolumn:name="Hit Rate",type=string,JSONPath=`.status.storeHits.ratio`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ModelDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the deployment.
	Spec ModelDeploymentSpec `json:"spec"`
	// Status is observed.
	// +optional
	Status ModelDeploymentStatus `json:"status,omitempty"`
}

// ModelDeploymentList is a list of ModelDeployments.
// +kubebuilder:object:root=true
type ModelDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelDeployment `json:"items"`
}
