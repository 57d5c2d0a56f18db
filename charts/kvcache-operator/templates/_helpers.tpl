{{- define "kvcache-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "kvcache-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kvcache-operator.labels" -}}
{{ include "kvcache-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "kvcache-operator.webhookService" -}}
{{ include "kvcache-operator.fullname" . }}-webhook
{{- end }}

{{- define "kvcache-operator.certSecret" -}}
{{ .Values.webhook.certs.secretName | default (printf "%s-webhook-tls" (include "kvcache-operator.fullname" .)) }}
{{- end }}

{{- define "kvcache-operator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
