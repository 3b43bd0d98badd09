{{/*
A map rendered as a TOML document: "mcp-state-guard.toml" takes the map.

Helm reads every number of a values file as a float64, and `toString` or `toToml` would
write 300 as 300.0 or 3e+02, which the sidecar refuses where it expects an integer; so
a number with no fractional part is written as an integer (int and int64 values, as
`--set` gives, are kept as they are). Strings are TOML basic strings with JSON's escapes
(a subset of TOML's); keys are bare when they can be, quoted otherwise. In each table,
plain keys come first, then sub-tables ([a.b]) and arrays of tables ([[a.b]]), so every
key lands in the table it belongs to. Null values are left out (Helm's way of unsetting).
*/}}
{{- define "mcp-state-guard.toml" -}}
{{- include "mcp-state-guard.toml.table" (dict "path" "" "table" .) }}
{{- end }}

{{- define "mcp-state-guard.toml.table" -}}
{{- $path := .path }}
{{- $table := .table }}
{{- $tables := list }}
{{- $arrays := list }}
{{- range $key, $value := $table }}
{{- if kindIs "map" $value }}
{{- $tables = append $tables $key }}
{{- else if and (kindIs "slice" $value) (gt (len $value) 0) (eq (include "mcp-state-guard.toml.allMaps" $value) "true") }}
{{- $arrays = append $arrays $key }}
{{- else if not (kindIs "invalid" $value) }}
{{- printf "%s = %s\n" (include "mcp-state-guard.toml.key" $key) (include "mcp-state-guard.toml.value" $value) }}
{{- end }}
{{- end }}
{{- range $key := $tables }}
{{- $sub := include "mcp-state-guard.toml.path" (dict "path" $path "key" $key) }}
{{- printf "\n[%s]\n" $sub }}
{{- include "mcp-state-guard.toml.table" (dict "path" $sub "table" (get $table $key)) }}
{{- end }}
{{- range $key := $arrays }}
{{- $sub := include "mcp-state-guard.toml.path" (dict "path" $path "key" $key) }}
{{- range $element := get $table $key }}
{{- printf "\n[[%s]]\n" $sub }}
{{- include "mcp-state-guard.toml.table" (dict "path" $sub "table" $element) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mcp-state-guard.toml.path" -}}
{{- $key := include "mcp-state-guard.toml.key" .key }}
{{- if .path }}{{ printf "%s.%s" .path $key }}{{ else }}{{ $key }}{{ end }}
{{- end }}

{{- define "mcp-state-guard.toml.allMaps" -}}
{{- $all := true }}
{{- range . }}{{ if not (kindIs "map" .) }}{{ $all = false }}{{ end }}{{ end }}
{{- $all }}
{{- end }}

{{- define "mcp-state-guard.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end }}
{{- end }}

{{- define "mcp-state-guard.toml.value" -}}
{{- if kindIs "string" . }}
{{- toJson . }}
{{- else if kindIs "bool" . }}
{{- ternary "true" "false" . }}
{{- else if or (kindIs "int" .) (kindIs "int64" .) (kindIs "int32" .) (kindIs "uint64" .) }}
{{- printf "%d" . }}
{{- else if kindIs "float64" . }}
{{- if and (eq . (floor .)) (lt . 9.2e18) (gt . -9.2e18) }}
{{- printf "%d" (int64 .) }}
{{- else }}
{{- printf "%v" . }}
{{- end }}
{{- else if kindIs "slice" . }}
{{- $items := list }}
{{- range . }}
{{- if kindIs "invalid" . }}{{ fail "config: an array holds a null; TOML has none" }}{{ end }}
{{- $items = append $items (include "mcp-state-guard.toml.value" .) }}
{{- end }}
{{- printf "[%s]" (join ", " $items) }}
{{- else if kindIs "map" . }}
{{- $items := list }}
{{- range $key, $value := . }}
{{- if not (kindIs "invalid" $value) }}
{{- $items = append $items (printf "%s = %s" (include "mcp-state-guard.toml.key" $key) (include "mcp-state-guard.toml.value" $value)) }}
{{- end }}
{{- end }}
{{- printf "{%s}" (join ", " $items) }}
{{- else }}
{{- fail (printf "config: cannot write %v (%s) as TOML" . (kindOf .)) }}
{{- end }}
{{- end }}
