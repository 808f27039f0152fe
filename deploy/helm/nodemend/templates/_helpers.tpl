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

{{/*
nodemend.repairConditions: the evidence table of the admission policies, as
a CEL map literal (JSON) of condition type → the statuses that count as
unhealthy: admissionPolicy.repairConditions plus the rules of every policy in
repairPolicies. toJson sorts the keys, so the rendering is stable.
*/}}
{{- define "nodemend.repairConditions" -}}
{{- $m := dict -}}
{{- range $t, $s := .Values.admissionPolicy.repairConditions }}{{ $_ := set $m $t (sortAlpha $s | uniq) }}{{ end -}}
{{- range .Values.repairPolicies }}{{ range (.spec.rules | default list) }}
{{- $_ := set $m .conditionType (append (get $m .conditionType | default list) .status | uniq | sortAlpha) -}}
{{- end }}{{ end -}}
{{- toJson $m -}}
{{- end -}}

{{/*
nodemend.nodeVariables: ValidatingAdmissionPolicy variables shared by the
policies on Nodes: the Node as admitted (the old one for DELETE), its
annotations before and after, the keys a request sets, changes or removes,
and its repair taints before and after.
*/}}
{{- define "nodemend.nodeVariables" -}}
- name: node
  expression: "request.operation == 'DELETE' ? oldObject : object"
- name: annNew
  expression: "request.operation == 'DELETE' ? {} : object.metadata.?annotations.orValue({})"
- name: annOld
  expression: "request.operation == 'CREATE' ? {} : oldObject.metadata.?annotations.orValue({})"
# Keys set or changed, then keys removed.
- name: annChanged
  expression: >-
    variables.annNew.filter(k, !(k in variables.annOld) || variables.annOld[k] != variables.annNew[k]) +
    variables.annOld.filter(k, !(k in variables.annNew))
- name: taintNew
  expression: "request.operation == 'DELETE' ? [] : object.spec.?taints.orValue([]).filter(t, t.key == 'nodemend.dev/repair')"
- name: taintOld
  expression: "request.operation == 'CREATE' ? [] : oldObject.spec.?taints.orValue([]).filter(t, t.key == 'nodemend.dev/repair')"
# The person's acts (docs/security.md#a-persons-acts) and the verb on
# nodes.nodemend.dev that each needs.
- name: actVerbs
  expression: "{'nodemend.dev/do-not-repair': 'veto', 'nodemend.dev/release': 'release', 'nodemend.dev/repair-now': 'repair'}"
{{- end -}}

{{/*
nodemend.quietPeriods: the quiet period the agents give every Fatal
log-derived reason, by the condition it sets False, as a CEL map of lists
[reason, quiet period, where it is set], each list in name order: the
registry's (files/quiet-periods.yaml, generated from pkg/health/reasons.yaml
by make generate), overridden as the agent overrides it — by the quietPeriod
of the reason's families in agent.config.reasons, then of the reason itself.
*/}}
{{- define "nodemend.quietPeriods" -}}
{{- $gen := .Files.Get "files/quiet-periods.yaml" | fromYaml -}}
{{- $over := .Values.agent.config.reasons | default dict -}}
{{- $out := dict -}}
{{- range $cond, $reasons := $gen.conditions -}}
{{- $list := list -}}
{{- range $name, $registry := $reasons -}}
{{- $q := $registry -}}
{{- $from := "the registry's" -}}
{{- range $gen.families -}}
{{- $fam := .name -}}
{{- if and (has $name .members) (hasKey $over $fam) -}}
{{- with (get $over $fam).quietPeriod }}{{ $q = . }}{{ $from = printf "set by agent.config.reasons.%s" $fam }}{{ end -}}
{{- end -}}
{{- end -}}
{{- if hasKey $over $name -}}
{{- with (get $over $name).quietPeriod }}{{ $q = . }}{{ $from = printf "set by agent.config.reasons.%s" $name }}{{ end -}}
{{- end -}}
{{- $list = append $list (list $name (toString $q) $from) -}}
{{- end -}}
{{- $_ := set $out $cond $list -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
nodemend.quietFamilies: the families that name Fatal log-derived reasons,
with those members, as a CEL map (a rule's reasons may name a family).
*/}}
{{- define "nodemend.quietFamilies" -}}
{{- $gen := .Files.Get "files/quiet-periods.yaml" | fromYaml -}}
{{- $out := dict -}}
{{- range $gen.families }}{{ $_ := set $out .name .members }}{{ end -}}
{{- toJson $out -}}
{{- end -}}
