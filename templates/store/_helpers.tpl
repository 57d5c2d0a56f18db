{{/*
Partials shared by the store templates. Every store object carries the same identity labels and a
controller owner reference to its KVCacheBackend.
Context of each partial: (dict "Root" $ "Component" "<component>" ["Name" "<object name>"]).
*/}}

{{- define "store.selectorLabels" -}}
{{ .Root.Names.LabelName }}: {{ toJson .Root.Names.StoreName }}
{{ .Root.Names.LabelInstance }}: {{ toJson .Root.Name }}
{{ .Root.Names.LabelComponent }}: {{ toJson .Component }}
{{- end }}

{{- define "store.labels" -}}
{{ include "store.selectorLabels" . }}
{{ .Root.Names.LabelManagedBy }}: {{ toJson .Root.Names.ManagedBy }}
{{- end }}

{{- define "store.metadata" -}}
name: {{ required "store.metadata needs a Name" .Name | toJson }}
namespace: {{ toJson .Root.Namespace }}
labels:
  {{- include "store.labels" . | nindent 2 }}
ownerReferences:
  - {{ toJson .Root.Owner }}
{{- end }}
