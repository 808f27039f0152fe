{{/* Names and labels shared by every template. */}}

{{- define "nodemend.labels" -}}
app.kubernetes.io/part-of: nodemend
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "nodemend.agent.name" -}}nodemend-agent{{- end -}}
{{- define "nodemend.controller.name" -}}nodemend-controller{{- end -}}

{{/* Selector labels: stable across upgrades (a selector cannot change). */}}
{{- define "nodemend.agent.selector" -}}
app.kubernetes.io/name: nodemend-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "nodemend.controller.selector" -}}
app.kubernetes.io/name: nodemend-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* image renders registry/repository:tag for a component's image values. */}}
{{- define "nodemend.image" -}}
{{- $root := index . 0 -}}{{- $img := index . 1 -}}
{{- $tag := $img.tag | default $root.Values.image.tag | default $root.Chart.AppVersion -}}
{{- printf "%s/%s:%s" $root.Values.image.registry $img.repository $tag -}}
{{- end -}}

{{/* The agent's ServiceAccount, as the admission policy matches it. */}}
{{- define "nodemend.agent.username" -}}
system:serviceaccount:{{ .Release.Namespace }}:nodemend-agent
{{- end -}}
