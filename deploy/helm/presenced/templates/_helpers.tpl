{{/* The chart's name, or nameOverride. */}}
{{- define "presenced.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's objects' name: fullnameOverride, or release-chart. */}}
{{- define "presenced.fullname" -}}
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

{{/* The labels that select the release's pods. */}}
{{- define "presenced.selectorLabels" -}}
app.kubernetes.io/name: {{ include "presenced.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Every object's labels. */}}
{{- define "presenced.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "presenced.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The Secret the pods read: the chart's own, or existingSecret. */}}
{{- define "presenced.secretName" -}}
{{- if .Values.secrets.existingSecret }}
{{- .Values.secrets.existingSecret }}
{{- else }}
{{- include "presenced.fullname" . }}
{{- end }}
{{- end }}

{{/* "true" when the chart makes the Secret the pods read. */}}
{{- define "presenced.ownSecret" -}}
{{- if and .Values.secrets.create (not .Values.secrets.existingSecret) }}true{{ end }}
{{- end }}

{{/* "true" when the pods run demo mode: nothing to check a token with. */}}
{{- define "presenced.demoMode" -}}
{{- if and (include "presenced.ownSecret" .) (not .Values.secrets.jwtSecret) (not .Values.jwksUrl) (not .Values.jwtPublicKey) }}true{{ end }}
{{- end }}

{{/* The checks of the values, each failing with what to set. */}}
{{- define "presenced.validate" -}}
{{- if hasKey .Values.settings "webhook" }}
{{- fail "settings.webhook is now webhook.url: the URL is kept in the Secret, since it may hold a password" }}
{{- end }}
{{- if not (include "presenced.ownSecret" .) }}
{{- $stored := dict "secrets.jwtSecret" .Values.secrets.jwtSecret "secrets.apiKey" .Values.secrets.apiKey "secrets.webhookSecret" .Values.secrets.webhookSecret "redis.url" .Values.redis.url "webhook.url" .Values.webhook.url }}
{{- range $name, $value := $stored }}
{{- if $value }}
{{- fail (printf "%s would be dropped: with secrets.existingSecret (or secrets.create=false) the chart makes no Secret; put it in your Secret (keys jwt-secret, api-key, webhook-secret, redis-url, webhook-url) and leave %s empty" $name $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (include "presenced.demoMode" .) (not .Values.demo) }}
{{- fail "no way to check who a client is: set secrets.jwtSecret (HS256), jwksUrl or jwtPublicKey (RS256, ES256), or secrets.existingSecret (a Secret with a jwt-secret key); or demo=true for demo mode, where the server trusts ?uid= and anyone who reaches a pod can claim any user ID" }}
{{- end }}
{{- if gt (len (compact (list .Values.secrets.jwtSecret .Values.jwksUrl .Values.jwtPublicKey))) 1 }}
{{- fail "give one of secrets.jwtSecret, jwksUrl and jwtPublicKey: the server takes one source of token keys" }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.redis.url) (include "presenced.ownSecret" .) }}
{{- fail "replicaCount > 1 needs redis.url (or a redis-url key in secrets.existingSecret): without Redis each replica would see only its own users" }}
{{- end }}
{{- end }}
