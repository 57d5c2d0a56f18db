{{/*
The admission webhook configurations: the single source the Helm chart installs and the envtest
suites install (pointed at a local server). Context: a dict with
  Name       the configurations' name (the release's fullname)
  Namespace  the manager's namespace (its Pods are never sent to the Pod webhooks)
  Service    the webhook Service's name in Namespace
  CABundle   the base64 CA bundle ("" when something else injects it, e.g. cert-manager)
  Labels       labels for both configurations (map; may be empty)
  Annotations  extra annotations for both configurations (map; may be empty)
*/}}

{{- define "kvcache.webhook.clientConfig" -}}
clientConfig:
  service:
    name: {{ toJson .Root.Service }}
    namespace: {{ toJson .Root.Namespace }}
    path: {{ toJson .Path }}
    port: 443
  {{- with .Root.CABundle }}
  caBundle: {{ toJson . }}
  {{- end }}
{{- end }}

{{- define "kvcache.webhook.optedIn" -}}
objectSelector:
  matchExpressions:
    - key: kvcache.gpustack.ai/inject
      operator: In
      values: ["true"]
{{ include "kvcache.webhook.notManager" . }}
{{- end }}

{{- define "kvcache.webhook.notManager" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: [{{ .Namespace | quote }}]
{{- end }}

{{- define "kvcache.webhooks" -}}
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: {{ toJson .Name }}
  {{- with .Labels }}
  labels:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
webhooks:
  # Pod injection fails closed: an opted-in Pod that cannot be injected would start normally
  # and cache nothing. CREATE only: injection runs once, never on a live Pod.
  - name: inject.pods.kvcache.gpustack.ai
    admissionReviewVersions: ["v1"]
    {{- include "kvcache.webhook.clientConfig" (dict "Root" . "Path" "/mutate-v1-pod") | nindent 4 }}
    rules:
      - operations: ["CREATE"]
        apiGroups: [""]
        apiVersions: ["v1"]
        resources: ["pods"]
        scope: Namespaced
    failurePolicy: Fail
    reinvocationPolicy: Never
    sideEffects: None
    matchPolicy: Equivalent
    timeoutSeconds: 10
    {{- include "kvcache.webhook.optedIn" . | nindent 4 }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {{ toJson .Name }}
  {{- with .Labels }}
  labels:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
webhooks:
  # The freeze keeps the injection record honest, and fails open: it must never be the reason
  # a live Pod cannot be updated or finish terminating.
  - name: freeze.pods.kvcache.gpustack.ai
    admissionReviewVersions: ["v1"]
    {{- include "kvcache.webhook.clientConfig" (dict "Root" . "Path" "/validate-v1-pod") | nindent 4 }}
    rules:
      - operations: ["UPDATE"]
        apiGroups: [""]
        apiVersions: ["v1"]
        resources: ["pods"]
        scope: Namespaced
    failurePolicy: Ignore
    sideEffects: None
    matchPolicy: Equivalent
    timeoutSeconds: 10
    {{- include "kvcache.webhook.optedIn" . | nindent 4 }}
  # The same freeze for the Pods rendered for a ModelDeployment: they carry the written keys
  # without the opt-in label, and a selector cannot say "either label".
  - name: freeze-rendered.pods.kvcache.gpustack.ai
    admissionReviewVersions: ["v1"]
    {{- include "kvcache.webhook.clientConfig" (dict "Root" . "Path" "/validate-v1-pod") | nindent 4 }}
    rules:
      - operations: ["UPDATE"]
        apiGroups: [""]
        apiVersions: ["v1"]
        resources: ["pods"]
        scope: Namespaced
    failurePolicy: Ignore
    sideEffects: None
    matchPolicy: Equivalent
    timeoutSeconds: 10
    objectSelector:
      matchExpressions:
        - key: kvcache.gpustack.ai/model-deployment
          operator: Exists
    {{- include "kvcache.webhook.notManager" . | nindent 4 }}
  {{- range list "kvcachebackend" "kvcachepool" "kvcachepoolbinding" "modeldeployment" "setting" }}
  - name: {{ . }}s.worker.gpustack.ai
    admissionReviewVersions: ["v1"]
    {{- include "kvcache.webhook.clientConfig" (dict "Root" $ "Path" (printf "/validate-worker-gpustack-ai-v1-%s" .)) | nindent 4 }}
    rules:
      - operations: ["CREATE", "UPDATE"]
        apiGroups: ["worker.gpustack.ai"]
        apiVersions: ["v1"]
        resources: ["{{ . }}s"]
    failurePolicy: Fail
    sideEffects: None
    matchPolicy: Equivalent
    timeoutSeconds: 10
  {{- end }}
{{- end }}
