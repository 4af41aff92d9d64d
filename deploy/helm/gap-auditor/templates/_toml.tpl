{{/*
`config` (a YAML map) as the TOML of gap-auditor.toml. Helm's own toToml is not used: Helm
reads every number of a values file as a float, which toToml writes as `1000.0` or
`1e+07`, and the auditor's integer keys (batch_size, field_count) refuse those. Here a
whole number is written as an integer, strings as TOML basic strings (JSON's escapes are
TOML's), keys bare when they can be and quoted otherwise (librdkafka's dotted
properties). A table's plain keys come before its sub-tables, which come before its arrays
of tables, as TOML requires. scripts/helm-check.sh round-trips a values file of awkward
values through it (tomllib must read back exactly the YAML).
*/}}

{{- define "gap-auditor.toml" -}}
{{- include "gap-auditor.toml.table" (dict "path" (list) "map" .) | trim }}
{{- end }}

{{- define "gap-auditor.toml.table" -}}
{{- $path := .path }}
{{- range $k, $v := .map }}
{{- if not (or (kindIs "map" $v) (kindIs "invalid" $v) (include "gap-auditor.toml.isTableArray" $v)) }}
{{ include "gap-auditor.toml.key" $k }} = {{ include "gap-auditor.toml.value" $v }}
{{- end }}
{{- end }}
{{- range $k, $v := .map }}
{{- if kindIs "map" $v }}
{{- $sub := append $path $k }}

[{{ include "gap-auditor.toml.path" $sub }}]
{{- include "gap-auditor.toml.table" (dict "path" $sub "map" $v) }}
{{- end }}
{{- end }}
{{- range $k, $v := .map }}
{{- if include "gap-auditor.toml.isTableArray" $v }}
{{- $sub := append $path $k }}
{{- range $item := $v }}

[[{{ include "gap-auditor.toml.path" $sub }}]]
{{- include "gap-auditor.toml.table" (dict "path" $sub "map" $item) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* "true" for a non-empty list of maps (an array of tables). */}}
{{- define "gap-auditor.toml.isTableArray" -}}
{{- if and (kindIs "slice" .) (gt (len .) 0) }}{{ if kindIs "map" (first .) }}true{{ end }}{{ end }}
{{- end }}

{{- define "gap-auditor.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end }}
{{- end }}

{{- define "gap-auditor.toml.path" -}}
{{- range $i, $k := . }}{{ if $i }}.{{ end }}{{ include "gap-auditor.toml.key" $k }}{{ end }}
{{- end }}

{{- define "gap-auditor.toml.value" -}}
{{- if kindIs "string" . }}{{ toJson . }}
{{- else if kindIs "bool" . }}{{ . }}
{{- else if kindIs "float64" . }}
{{- if and (eq (floor .) .) (lt . 9007199254740992.0) (gt . -9007199254740992.0) }}{{ int64 . }}{{ else }}{{ toJson . }}{{ end }}
{{- else if or (kindIs "int" .) (kindIs "int64" .) (kindIs "uint64" .) }}{{ . }}
{{- else if kindIs "slice" . }}[{{ range $i, $e := . }}{{ if $i }}, {{ end }}{{ include "gap-auditor.toml.value" $e }}{{ end }}]
{{- else if kindIs "map" . }}{ {{- range $i, $k := keys . | sortAlpha }}{{ if $i }},{{ end }} {{ include "gap-auditor.toml.key" $k }} = {{ include "gap-auditor.toml.value" (get $ $k) }}{{ end }} }
{{- else }}{{ fail (printf "config: %v (%s) cannot be written as TOML" . (kindOf .)) }}
{{- end }}
{{- end }}
