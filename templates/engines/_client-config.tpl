{{/*
The vLLM family's client configuration: the document projected at
/etc/gpustack/kvcache/mooncake.json from the Pod's kvcache.gpustack.ai/client-config annotation.
Every key is written explicitly, because two of the readers' defaults are GiB of host memory
(global_segment_size 0 keeps the engine a pure client). local_hostname is absent on purpose: the
engine computes its own at start, when the Pod has an address. tenant_id is absent when the
backend keeps no tenant ledger.
*/}}
{{- define "engines.clientConfig" -}}
{"metadata_server":"P2PHANDSHAKE","master_server_address":{{ toJson .Master }},"protocol":{{ toJson .Protocol }},"device_name":"","global_segment_size":0,"local_buffer_size":{{ .LocalBufferSize }}{{ with .Tenant }},"tenant_id":{{ toJson . }}{{ end }}}
{{- end }}
