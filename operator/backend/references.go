package backend

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// references maps "Kind/name" of every object the given live objects depend on to the first
// one that does ("Deployment/x"): the ServiceAccounts and ConfigMaps of workloads' pod
// templates and of Pods still running, and the Roles of RoleBindings.
func references(live []client.Object) map[string]string {
	refs := map[string]string{}
	add := func(kind, name, by string) {
		if name != "" && refs[kind+"/"+name] == "" {
			refs[kind+"/"+name] = by
		}
	}
	for _, o := range live {
		switch x := o.(type) {
		case *appsv1.Deployment:
			podSpecReferences(&x.Spec.Template.Spec, "Deployment/"+x.Name, add)
		case *appsv1.DaemonSet:
			podSpecReferences(&x.Spec.Template.Spec, "DaemonSet/"+x.Name, add)
		case *corev1.Pod:
			// A Pod that has finished runs nothing; one terminating still may.
			if x.Status.Phase != corev1.PodSucceeded && x.Status.Phase != corev1.PodFailed {
				podSpecReferences(&x.Spec, "Pod/"+x.Name, add)
			}
		case *rbacv1.RoleBinding:
			if x.RoleRef.Kind == "Role" {
				add("Role", x.RoleRef.Name, "RoleBinding/"+x.Name)
			}
		}
	}
	return refs
}

// podSpecReferences reports the account a Pod runs as (both the field and its deprecated alias,
// which the API server keeps in step) and every ConfigMap it reads.
func podSpecReferences(p *corev1.PodSpec, by string, add func(kind, name, by string)) {
	add("ServiceAccount", p.ServiceAccountName, by)
	add("ServiceAccount", p.DeprecatedServiceAccount, by)
	for _, v := range p.Volumes {
		if v.ConfigMap != nil {
			add("ConfigMap", v.ConfigMap.Name, by)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					add("ConfigMap", src.ConfigMap.Name, by)
				}
			}
		}
	}
	for _, cs := range [][]corev1.Container{p.InitContainers, p.Containers} {
		for _, c := range cs {
			for _, e := range c.EnvFrom {
				if e.ConfigMapRef != nil {
					add("ConfigMap", e.ConfigMapRef.Name, by)
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
					add("ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name, by)
				}
			}
		}
	}
}
