{{/*
The vLLM family's client configuration: the document projected at
/etc/gpustack/kvcache/mooncake.json from the Pod's kvcache.gpustack.ai/client-config annotation.
Every key is written explicitly, because two of the readers' defaults are GiB of host memory.
global_segment_size 0 contributes no memory to the store; on vLLM that is accepted only with mode
standalone-store (its default mode, embedded, refuses a zero segment at connector start), which
is also what an engine that only reads and writes the operator's store is. local_hostname is
absent on purpose: the engine computes its own at start, when the Pod has an address. tenant_id
is always the Binding's domain; a master without a tenant ledger ignores it.
*/}}
{{- define "engines.clientConfig" -}}
{"metadata_server":{{ toJson .Names.MetadataServer }},"master_server_address":{{ toJson .Master }},"protocol":{{ toJson .Protocol }},"device_name":"","global_segment_size":0,"local_buffer_size":{{ .LocalBufferSize }},"tenant_id":{{ toJson .Tenant }}{{ with .Mode }},"mode":{{ toJson . }}{{ end }}}
{{- end }}
