{{/*
The fabric partial: what a member needs to reach an RDMA or EFA device. The generator sets
.Fabric only for those two protocols; every other protocol gets nothing from here. Capabilities are
added one by one: a member is never privileged.
*/}}

{{- define "store.fabric.pod" -}}
{{- if .Fabric }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- end }}

{{- define "store.fabric.securityContext" -}}
{{- if .Fabric }}
securityContext:
  capabilities:
    add:
      - IPC_LOCK
      - SYS_RESOURCE
{{- end }}
{{- end }}

{{- define "store.fabric.limits" -}}
{{- if .Fabric }}
limits:
  {{ .Fabric.ResourceName }}: {{ .Fabric.Count | quote }}
{{- end }}
{{- end }}
