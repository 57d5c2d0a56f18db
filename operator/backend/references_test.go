package backend

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestReferences(t *testing.T) {
	leader := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "m-leader"}}
	leader.Spec.Template.Spec = corev1.PodSpec{
		ServiceAccountName: "default", DeprecatedServiceAccount: "m-leader", // the alias still naming the old account
		Volumes: []corev1.Volume{{Name: "seed", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "m-tenant-quota-policy"}}}}},
	}
	member := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "m-member-0-x"}, Spec: corev1.PodSpec{ServiceAccountName: "m-member"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	finished := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "m-member-0-old"}, Spec: corev1.PodSpec{ServiceAccountName: "m-gone"},
		Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	envFrom := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "m-member-1"}}
	envFrom.Spec.Template.Spec.Containers = []corev1.Container{{Name: "member",
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "extra-env"}}}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "m-leader"}, RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "m-leader"}}

	assert.Equal(t, map[string]string{
		"ServiceAccount/default":          "Deployment/m-leader",
		"ServiceAccount/m-leader":         "Deployment/m-leader",
		"ConfigMap/m-tenant-quota-policy": "Deployment/m-leader",
		"ServiceAccount/m-member":         "Pod/m-member-0-x",
		"ConfigMap/extra-env":             "DaemonSet/m-member-1",
		"Role/m-leader":                   "RoleBinding/m-leader",
	}, references([]client.Object{leader, member, finished, envFrom, rb}), "a finished Pod references nothing")
}
