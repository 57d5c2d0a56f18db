package v1

// ObjectReference names an object that uses another; it is what the usedBy lists hold.
type ObjectReference struct {
	// Kind of the consumer, e.g. KVCachePool or ModelDeployment.
	Kind string `json:"kind"`
	// Namespace of the consumer; empty for cluster-scoped consumers.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name of the consumer.
	Name string `json:"name"`
}

// LocalReference names an object by name in an implied scope (the same namespace for a
// namespaced reference, the cluster for a cluster-scoped one).
type LocalReference struct {
	// Name of the referenced object.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// Phase is the one-word summary of an object's conditions shown by `kubectl get`.
// +kubebuilder:validation:Enum=Provisioning;Ready;Degraded;Error;Deleting;Pending
type Phase string

// Phases shared by the kinds of this API. Conditions carry the detail; the phase summarises.
const (
	PhaseProvisioning Phase = "Provisioning"
	PhaseReady        Phase = "Ready"
	PhaseDegraded     Phase = "Degraded"
	PhaseError        Phase = "Error"
	PhaseDeleting     Phase = "Deleting"
	PhasePending      Phase = "Pending"
)
