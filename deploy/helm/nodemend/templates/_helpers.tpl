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

{{/* The controller's ServiceAccount, as the admission policies match it. */}}
{{- define "nodemend.controller.username" -}}
system:serviceaccount:{{ .Release.Namespace }}:nodemend-controller
{{- end -}}

{{/*
nodemend.eventFields: ValidatingAdmissionPolicy variables that read an
Event the same way through both APIs (core/v1 and events.k8s.io/v1 name the
fields differently). Argument: (list OBJECT PREFIX), OBJECT being "object"
or "oldObject" (read only on UPDATE, when it exists).
*/}}
{{- define "nodemend.eventFields" -}}
{{- $o := index . 0 -}}{{- $p := index . 1 -}}
{{- $guard := ternary "request.operation != 'UPDATE' ? '' : " "" (eq $o "oldObject") -}}
- name: {{ $p }}Kind
  expression: "{{ $guard }}variables.core ? {{ $o }}.?involvedObject.?kind.orValue('') : {{ $o }}.?regarding.?kind.orValue('')"
- name: {{ $p }}Name
  expression: "{{ $guard }}variables.core ? {{ $o }}.?involvedObject.?name.orValue('') : {{ $o }}.?regarding.?name.orValue('')"
- name: {{ $p }}Namespace
  expression: "{{ $guard }}variables.core ? {{ $o }}.?involvedObject.?namespace.orValue('') : {{ $o }}.?regarding.?namespace.orValue('')"
- name: {{ $p }}Controller
  expression: "{{ $guard }}variables.core ? {{ $o }}.?reportingComponent.orValue('') : {{ $o }}.?reportingController.orValue('')"
- name: {{ $p }}Instance
  expression: "{{ $guard }}{{ $o }}.?reportingInstance.orValue('')"
- name: {{ $p }}SourceComponent
  expression: "{{ $guard }}variables.core ? {{ $o }}.?source.?component.orValue('') : {{ $o }}.?deprecatedSource.?component.orValue('')"
- name: {{ $p }}SourceHost
  expression: "{{ $guard }}variables.core ? {{ $o }}.?source.?host.orValue('') : {{ $o }}.?deprecatedSource.?host.orValue('')"
- name: {{ $p }}Related
  expression: "{{ if eq $o "oldObject" }}request.operation == 'UPDATE' && {{ end }}has({{ $o }}.related)"
- name: {{ $p }}RelatedKind
  expression: "{{ $guard }}{{ $o }}.?related.?kind.orValue('')"
{{- end -}}
