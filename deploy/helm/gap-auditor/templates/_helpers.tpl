{{/* Names, labels and the auditor container shared by both modes. */}}

{{- define "gap-auditor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's resource name: the release name when it already holds the chart's. */}}
{{- define "gap-auditor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gap-auditor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gap-auditor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gap-auditor.labels" -}}
{{ include "gap-auditor.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* flinkSidecar mode: the JobManager's labels, which its Deployment, Service and the
PodMonitor select on. */}}
{{- define "gap-auditor.flinkSelectorLabels" -}}
app: {{ .Values.flinkSidecar.name }}
component: jobmanager
{{- end }}

{{/* The port of config.server.listen (default 0.0.0.0:9464): the container port, the
probes, the Service and the monitors all follow the address the daemon listens on. */}}
{{- define "gap-auditor.port" -}}
{{- $listen := "0.0.0.0:9464" }}
{{- with .Values.config.server }}{{ with .listen }}{{ $listen = . }}{{ end }}{{ end }}
{{- $port := last (splitList ":" $listen) }}
{{- if not (regexMatch "^[0-9]+$" $port) }}
{{- fail (printf "config.server.listen %q: expected host:port" $listen) }}
{{- end }}
{{- $port }}
{{- end }}

{{- define "gap-auditor.configMapName" -}}
{{ include "gap-auditor.fullname" . }}-config
{{- end }}

{{/* The store's claim: an existing one, or the chart's (<fullname>-state; beside Flink
<flinkSidecar.name>-gap-auditor-state). */}}
{{- define "gap-auditor.claimName" -}}
{{- if .Values.persistence.existingClaim }}
{{- .Values.persistence.existingClaim }}
{{- else if eq .Values.mode "flinkSidecar" }}
{{- .Values.flinkSidecar.name }}-gap-auditor-state
{{- else }}
{{- include "gap-auditor.fullname" . }}-state
{{- end }}
{{- end }}

{{/* Volume names: `config` and `state` in the auditor's own pod; prefixed beside Flink,
whose pod has volumes of its own. */}}
{{- define "gap-auditor.volumePrefix" -}}
{{- if eq .Values.mode "flinkSidecar" }}gap-auditor-{{ end }}
{{- end }}

{{/* The auditor reads its config at start: in its own pod a config change rolls the pod
(checksum/config). Beside Flink it does not: that would restart the JobManager, and the job
with it, for the auditor's sake; the new config applies at the JobManager's next restart
(`kubectl rollout restart`). */}}
{{- define "gap-auditor.podAnnotations" -}}
{{- if ne .Values.mode "flinkSidecar" }}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- end }}
{{- if .Values.scrapeAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ include "gap-auditor.port" . | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The pod's volumes of the auditor: its config and its store. */}}
{{- define "gap-auditor.volumes" -}}
{{- $prefix := include "gap-auditor.volumePrefix" . -}}
- name: {{ $prefix }}config
  configMap:
    name: {{ include "gap-auditor.configMapName" . }}
- name: {{ $prefix }}state
{{- if .Values.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "gap-auditor.claimName" . }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The auditor container. Readiness is /readyz in its own pod (Kafka and every sink
answered in the last round; its Service publishes not-ready addresses), /healthz beside a
Flink JobManager (a pod is Ready only when every container is: the auditor's view of its
sink must not take the JobManager out of its Service). */}}
{{- define "gap-auditor.container" -}}
{{- $sidecar := eq .Values.mode "flinkSidecar" -}}
{{- $prefix := include "gap-auditor.volumePrefix" . -}}
- name: gap-auditor
  image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["run", "-c", "/etc/gap-auditor/gap-auditor.toml"]
  env:
    {{- if .Values.logJson }}
    - name: GAP_AUDITOR_LOG_FORMAT
      value: json
    {{- end }}
    {{- range $name, $value := .Values.env }}
    - name: {{ $name }}
      value: {{ $value | toString | quote }}
    {{- end }}
    {{- range $name, $ref := .Values.secretEnv }}
    {{- if $ref }}
    - name: {{ $name }}
      valueFrom:
        secretKeyRef:
          name: {{ $ref.name }}
          key: {{ $ref.key }}
          {{- if $ref.optional }}
          optional: true
          {{- end }}
    {{- end }}
    {{- end }}
  ports:
    - name: metrics
      containerPort: {{ include "gap-auditor.port" . }}
      protocol: TCP
  livenessProbe:
    httpGet:
      path: /healthz
      port: metrics
    {{- toYaml .Values.livenessProbe | nindent 4 }}
  readinessProbe:
    httpGet:
      path: {{ if $sidecar }}/healthz{{ else }}/readyz{{ end }}
      port: metrics
    {{- toYaml .Values.readinessProbe | nindent 4 }}
  {{- with .Values.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- if $sidecar }}
    {{- toYaml (merge (pick .Values.podSecurityContext "runAsNonRoot" "runAsUser" "runAsGroup") .Values.securityContext) | nindent 4 }}
    {{- else }}
    {{- toYaml .Values.securityContext | nindent 4 }}
    {{- end }}
  volumeMounts:
    - name: {{ $prefix }}config
      mountPath: /etc/gap-auditor
      readOnly: true
    - name: {{ $prefix }}state
      mountPath: /var/lib/gap-auditor
    {{- with .Values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* Refusals that a schema cannot express. */}}
{{- define "gap-auditor.checks" -}}
{{- $path := "./gap-auditor-state" }}
{{- with .Values.config.state }}{{ with .path }}{{ $path = . }}{{ end }}{{ end }}
{{- if not (hasPrefix "/var/lib/gap-auditor/" (printf "%s/" (trimSuffix "/" $path))) }}
{{- fail (printf "config.state.path %q must lie under /var/lib/gap-auditor (the store volume; the root filesystem is read-only)" $path) }}
{{- end }}
{{- end }}
