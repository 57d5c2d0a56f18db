{{/*
Partials of the ModelDeployment templates. Context: (dict "Root" $ "Role" $role).
*/}}
{{- define "md.selectorLabels" -}}
app.kubernetes.io/name: model-deployment
app.kubernetes.io/instance: {{ toJson .Root.Name }}
app.kubernetes.io/component: {{ toJson .Role.Name }}
{{- end }}

{{- define "md.labels" -}}
{{ include "md.selectorLabels" . }}
app.kubernetes.io/managed-by: kvcache-operator
worker.gpustack.ai/role-kind: {{ toJson .Role.Kind }}
{{- end }}

{{- define "md.metadata" -}}
name: {{ toJson .Role.ObjectName }}
namespace: {{ toJson .Root.Namespace }}
labels:
  {{- include "md.labels" . | nindent 2 }}
ownerReferences:
  - {{ toJson .Root.Owner }}
{{- end }}
