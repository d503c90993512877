{{/* Names and labels shared by every template of the chart. */}}

{{- define "tj-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name when it already holds the chart's name. */}}
{{- define "tj-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "tj-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tj-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tj-operator.labels" -}}
{{ include "tj-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: trainingjob-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "tj-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tj-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tj-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The operator's flags for the jobs' NetworkPolicies: its pods, by namespace and labels. */}}
{{- define "tj-operator.networkPolicyArgs" -}}
- --network-policy
- --network-policy-operator-namespace={{ .Release.Namespace }}
- --network-policy-operator-labels=app.kubernetes.io/name={{ include "tj-operator.name" . }},app.kubernetes.io/instance={{ .Release.Name }}
{{- end }}
