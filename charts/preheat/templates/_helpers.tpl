{{/* Names and labels shared by every template. */}}
{{- define "preheat.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "preheat.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/part-of: preheat
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "preheat.selector" -}}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/name: preheat-{{ .component }}
{{- end -}}

{{- define "preheat.image" -}}
{{- $repo := .image.repository -}}
{{- if .root.Values.image.registry -}}{{- $repo = printf "%s/%s" .root.Values.image.registry $repo -}}{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* Operator RBAC, least privilege: what it reads and writes, and nothing else. */}}
{{- define "preheat.operatorRules" }}
# Only what the operator calls (tests/cluster checks each grant against the calls the
# operator made in the cluster tier; the few it cannot exercise are listed there).
# The pools: watch (kopf), its finalizer (patch), status (patch).
- apiGroups: [preheat.dev]
  resources: [inferencepools]
  verbs: [get, list, watch, patch]
- apiGroups: [preheat.dev]
  resources: [inferencepools/status]
  verbs: [patch]
# Children carry an ownerReference to their pool with blockOwnerDeletion: where the
# OwnerReferencesPermissionEnforcement admission plugin is on (OpenShift), setting it needs
# update on the owner's finalizers subresource.
- apiGroups: [preheat.dev]
  resources: [inferencepools/finalizers]
  verbs: [update]
# The children of a pool: read, made, patched when they drift from the spec. Never listed
# or deleted: they go with their pool through ownerReferences.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [get, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch]
- apiGroups: [monitoring.coreos.com]
  resources: [servicemonitors]
  verbs: [get, create, patch]
{{- if .Values.networkPolicy.enabled }}
# A pool's NetworkPolicy (networkPolicy.enabled): read, made, patched like its other children.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch]
{{- end }}
# Worker pods (watched by label): roles (preheat.dev/role) and pod-deletion-cost are
# labels/annotations.
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, patch]
# Each pool's token Secret (<pool>-workers-control): read, made once, and patched only to
# put the workers' cache token in it. No list or watch: only the Secrets it names.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch]
# Every action is an Event on its pool (kopf posts core/v1 Events).
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/* The operator's config file (`preheat operator --config`): cluster-wide settings, not per
pool. Also hashed into the operator pod's checksum/config annotation. */}}
{{/* OpenTelemetry tracing (values: tracing): --tracing by environment, and the OTEL_*
variables, for the router, the operator and (through its config) every worker pod. */}}
{{- define "preheat.tracingEnv" -}}
- {name: PREHEAT_TRACING, value: "true"}
{{- with .Values.tracing.endpoint }}
- {name: OTEL_EXPORTER_OTLP_ENDPOINT, value: {{ . | quote }}}
{{- end }}
- {name: OTEL_EXPORTER_OTLP_INSECURE, value: {{ .Values.tracing.insecure | toString | quote }}}
- {name: OTEL_TRACES_SAMPLER, value: {{ .Values.tracing.sampler | quote }}}
{{- with .Values.tracing.samplerArg }}
- {name: OTEL_TRACES_SAMPLER_ARG, value: {{ . | quote }}}
{{- end }}
{{- end -}}

{{- define "preheat.operatorConfig" -}}
workerImage: {{ include "preheat.image" (dict "root" . "image" .Values.image.worker) }}
watchNamespaces: {{ .Values.operator.watchNamespaces | toJson }}
gpuTypes: {{ .Values.operator.gpuTypes | toJson }}
drainGraceSeconds: {{ .Values.operator.worker.drainGraceSeconds }}
preStopSleepSeconds: {{ .Values.operator.worker.preStopSleepSeconds }}
workerServiceMonitor: {{ .Values.operator.workerServiceMonitor | toString | quote }}
workerServiceMonitorLabels: {{ .Values.metrics.serviceMonitor.labels | toJson }}
{{- $pod := deepCopy .Values.operator.worker.pod }}
{{- if not $pod.imagePullSecrets }}{{- $_ := set $pod "imagePullSecrets" .Values.imagePullSecrets }}{{- end }}
{{- if .Values.tracing.enabled }}{{- $_ := set $pod "env" (concat $pod.env (include "preheat.tracingEnv" . | fromYamlArray)) }}{{- end }}
workerPod: {{ $pod | toJson }}
autoscaler:
  prometheusUrl: {{ .Values.operator.autoscaler.prometheusUrl | quote }}
  selector: {{ .Values.operator.autoscaler.selector | quote }}
  routerSelector: {{ .Values.operator.autoscaler.routerSelector | quote }}
  intervalSeconds: {{ .Values.operator.autoscaler.intervalSeconds }}
workerNetworkPolicy:
  enabled: {{ .Values.networkPolicy.enabled }}
  controlPlaneNamespace: {{ .Release.Namespace }}
  metricsNamespaces: {{ .Values.networkPolicy.metricsNamespaces | toJson }}
{{- end -}}
