{{/*
Partials shared by the store templates. Every store object carries the same identity labels and a
controller owner reference to its KVCacheBackend.
Context of each partial: (dict "Root" $ "Component" "<component>" ["Name" "<object name>"]).
*/}}

{{- define "store.selectorLabels" -}}
app.kubernetes.io/name: kv-cache-backend
app.kubernetes.io/instance: {{ toJson .Root.Name }}
app.kubernetes.io/component: {{ toJson .Component }}
{{- end }}

{{- define "store.labels" -}}
{{ include "store.selectorLabels" . }}
app.kubernetes.io/managed-by: kvcache-operator
{{- end }}

{{- define "store.metadata" -}}
name: {{ required "store.metadata needs a Name" .Name | toJson }}
namespace: {{ toJson .Root.Namespace }}
labels:
  {{- include "store.labels" . | nindent 2 }}
ownerReferences:
  - {{ toJson .Root.Owner }}
{{- end }}
