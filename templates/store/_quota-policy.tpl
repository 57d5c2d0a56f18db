{{/*
The tenant quota policy file the master reads at -tenant_quota_connector_uri (Mooncake's
format, version 1). The master aborts on a file without a tenants sequence, so an empty ledger is
written as an empty list. Quotas are plain bytes: the master's units are powers of 1024 spelled
KB/MB/GB, unlike Kubernetes' Ki/Mi/Gi.
*/}}
{{- define "store.quotaPolicy" -}}
version: 1
tenants:
{{- range .Tenants }}
  - name: {{ .Name | quote }}
    quota: {{ .QuotaBytes }}
{{- else }} []
{{- end }}
{{- end }}
