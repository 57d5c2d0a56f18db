{{/*
Partials of the ModelDeployment templates. Context: (dict "Root" $ "Role" $role).
*/}}
{{- define "md.selectorLabels" -}}
{{ .Root.Names.LabelName }}: {{ toJson .Root.Names.ModelDeploymentName }}
{{ .Root.Names.LabelInstance }}: {{ toJson .Root.Name }}
{{ .Root.Names.LabelComponent }}: {{ toJson .Role.Name }}
{{- end }}

{{- define "md.labels" -}}
{{ include "md.selectorLabels" . }}
{{ .Root.Names.LabelManagedBy }}: {{ toJson .Root.Names.ManagedBy }}
{{ .Root.Names.LabelRoleKind }}: {{ toJson .Role.Kind }}
{{- end }}

{{- define "md.metadata" -}}
name: {{ toJson .Role.ObjectName }}
namespace: {{ toJson .Root.Namespace }}
labels:
  {{- include "md.labels" . | nindent 2 }}
ownerReferences:
  - {{ toJson .Root.Owner }}
{{- end }}
