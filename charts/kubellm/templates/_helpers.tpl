{{/*
kubellm.name: the chart name, or nameOverride.
*/}}
{{- define "kubellm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
kubellm.fullname: the prefix of every resource name, `<release>-<name>` unless the
release name already contains the chart name; fullnameOverride replaces it.
*/}}
{{- define "kubellm.fullname" -}}
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

{{/*
kubellm.chart: chart name and version, for the helm.sh/chart label.
*/}}
{{- define "kubellm.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
kubellm.selectorLabels: the immutable labels that select the operator pod.
*/}}
{{- define "kubellm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubellm.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
kubellm.labels: the standard labels of every resource of the chart.
*/}}
{{- define "kubellm.labels" -}}
helm.sh/chart: {{ include "kubellm.chart" . }}
{{ include "kubellm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubellm
{{- end }}

{{/*
kubellm.serviceAccountName: the operator's ServiceAccount.
*/}}
{{- define "kubellm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kubellm.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
kubellm.runtimeImage: the model-serving image reference, repository:tag (tag defaults to
appVersion), what the operator gives LLMDeployments without spec.image.
*/}}
{{- define "kubellm.runtimeImage" -}}
{{- printf "%s:%s" (required "runtime.image.repository is required" .Values.runtime.image.repository) (default .Chart.AppVersion .Values.runtime.image.tag) }}
{{- end }}

{{/*
kubellm.image: the operator image reference, repository:tag (tag defaults to appVersion).
*/}}
{{- define "kubellm.image" -}}
{{- printf "%s:%s" (required "image.repository is required" .Values.image.repository) (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
