{{/*
The labels on every object of the release. The pod's own label,
app.kubernetes.io/name=fleetd, is fleetd's: the NetworkPolicy it makes in
each member namespace lets only pods with it reach the pane hosts.
*/}}
{{- define "fleetd.labels" -}}
app.kubernetes.io/name: fleetd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/*
fleetd.manifests renders the objects of a manifest the chart copies from
config/ (make manifests), one YAML document each, with the release's
labels and, as kustomize's namespace does, the release's namespace for
fleetd-system, so that config/ stays their one source. It takes a list: the root
context, the file's path, and the names of the objects to keep (all when
empty).
*/}}
{{- define "fleetd.manifests" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- $keep := index . 2 -}}
{{- $text := $root.Files.Get $path -}}
{{- if not $text }}{{ fail (printf "%s is missing from the chart: run make manifests" $path) }}{{ end -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" $text -1 }}
{{- $obj := fromYaml $doc }}
{{- if hasKey $obj "Error" }}{{ fail (printf "%s: %s" $path $obj.Error) }}{{ end }}
{{- if and $obj.kind (or (not $keep) (has $obj.metadata.name $keep)) }}
{{- if $obj.metadata.namespace }}{{ $_ := set $obj.metadata "namespace" $root.Release.Namespace }}{{ end }}
{{- range $obj.subjects }}{{ if eq .kind "ServiceAccount" }}{{ $_ := set . "namespace" $root.Release.Namespace }}{{ end }}{{ end }}
{{- $_ := set $obj.metadata "labels" (merge (default dict $obj.metadata.labels) (include "fleetd.labels" $root | fromYaml)) }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}
