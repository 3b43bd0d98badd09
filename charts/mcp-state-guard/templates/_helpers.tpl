{{/*
Names and labels (the Kubernetes recommended labels).
*/}}
{{- define "mcp-state-guard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcp-state-guard.fullname" -}}
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

{{- define "mcp-state-guard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcp-state-guard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcp-state-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcp-state-guard.labels" -}}
helm.sh/chart: {{ include "mcp-state-guard.chart" . }}
{{ include "mcp-state-guard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: mcp-server
app.kubernetes.io/part-of: {{ include "mcp-state-guard.name" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "mcp-state-guard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mcp-state-guard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag or repository@digest, from an image block and a default tag. */}}
{{- define "mcp-state-guard.imageRef" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .defaultTag .image.tag | toString) }}
{{- end }}
{{- end }}

{{- define "mcp-state-guard.keysSecretName" -}}
{{- default (printf "%s-keys" (include "mcp-state-guard.fullname" .)) .Values.keys.existingSecret }}
{{- end }}

{{- define "mcp-state-guard.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "mcp-state-guard.fullname" .)) .Values.tls.existingSecret }}
{{- end }}

{{/* Seconds of the sidecar's drain (timeouts.drain_ms, default 30000), rounded up. */}}
{{- define "mcp-state-guard.drainSeconds" -}}
{{- $timeouts := default dict .Values.config.timeouts }}
{{- $ms := int64 (default 30000 $timeouts.drain_ms) }}
{{- div (add $ms 999) 1000 }}
{{- end }}

{{/*
terminationGracePeriodSeconds: longer than the preStop delay, the sidecar's readiness
grace after SIGTERM (drain_ms / 6, at most 5 s) and the drain together, or the kubelet
kills streams the drain was meant to let finish.
*/}}
{{- define "mcp-state-guard.terminationGracePeriodSeconds" -}}
{{- $needed := add .Values.sidecar.preStopSleepSeconds 5 (include "mcp-state-guard.drainSeconds" . | int64) }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $needed 10 }}
{{- else if le (int64 .Values.terminationGracePeriodSeconds) (int64 $needed) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be longer than sidecar.preStopSleepSeconds + 5 s of readiness grace + timeouts.drain_ms (%d s in all)" .Values.terminationGracePeriodSeconds $needed) }}
{{- else }}
{{- int64 .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
The sidecar's configuration as a dict: `config` from the values, with what the chart
owns set (listeners, key file, the files it mounts) and the convenience blocks
(singleUse, tls, jwt) folded in. Call with (dict "ctx" $ "out" $dict); fills $dict
(a template can only return text, and a YAML round trip would turn integers into floats).
*/}}
{{- define "mcp-state-guard.buildConfig" -}}
{{- $ctx := .ctx }}
{{- $v := $ctx.Values }}
{{- $cfg := .out }}
{{- $_ := mergeOverwrite $cfg (deepCopy $v.config) }}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int64 $v.ports.proxy)) }}
{{- $_ := set $cfg "admin_listen" (printf "0.0.0.0:%d" (int64 $v.ports.admin)) }}
{{- if $v.stdio.enabled }}
{{- if not $v.stdio.command }}
{{- fail "stdio.enabled needs stdio.command: the stdio server's program and arguments" }}
{{- end }}
{{- $_ := set $cfg "upstream" "stdio" }}
{{- $command := default dict $cfg.upstream_command }}
{{- $_ := set $command "argv" $v.stdio.command }}
{{- if $v.stdio.env }}
{{- $_ := set $command "env" (merge (default dict $command.env) $v.stdio.env) }}
{{- end }}
{{- $_ := set $cfg "upstream_command" $command }}
{{- else if not (hasKey $cfg "upstream") }}
{{- $_ := set $cfg "upstream" (printf "http://127.0.0.1:%d%s" (int64 $v.server.port) $v.server.basePath) }}
{{- end }}
{{- $state := default dict $cfg.state }}
{{- $_ := set $cfg "state" $state }}
{{- $_ := set $state "keys_file" (printf "/etc/mcp-state-guard/keys/%s" $v.keys.secretKey) }}
{{- if not $state.audience }}
{{- $_ := set $state "audience" (printf "mcp-state-guard://%s/%s" $ctx.Release.Namespace (include "mcp-state-guard.fullname" $ctx)) }}
{{- end }}
{{- $su := default dict $cfg.single_use }}
{{- range $list := list "tools" "prompts" "resources" }}
{{- $names := concat (default list (get $su $list)) (get $v.singleUse $list) | uniq }}
{{- if $names }}
{{- $_ := set $su $list $names }}
{{- end }}
{{- end }}
{{- if $v.singleUse.redis.existingSecret }}
{{- $_ := set $su "store" "redis" }}
{{- end }}
{{- if $su }}
{{- $_ := set $cfg "single_use" $su }}
{{- end }}
{{- if $v.tls.enabled }}
{{- $tls := default dict $cfg.tls }}
{{- $_ := set $cfg "tls" $tls }}
{{- $_ := set $tls "cert_file" "/etc/mcp-state-guard/tls/tls.crt" }}
{{- $_ := set $tls "key_file" "/etc/mcp-state-guard/tls/tls.key" }}
{{- if $v.tls.clientCA }}
{{- $_ := set $tls "client_ca_file" "/etc/mcp-state-guard/tls/ca.crt" }}
{{- end }}
{{- end }}
{{- if $v.jwt.enabled }}
{{- $principal := default dict $cfg.principal }}
{{- $_ := set $cfg "principal" $principal }}
{{- $_ := set $principal "source" "jwt" }}
{{- $jwt := default dict $principal.jwt }}
{{- $_ := set $principal "jwt" $jwt }}
{{- $_ := set $jwt "issuer" $v.jwt.issuer }}
{{- $_ := set $jwt "audience" $v.jwt.audience }}
{{- if $v.jwt.jwksUrl }}
{{- $_ := set $jwt "jwks_url" $v.jwt.jwksUrl }}
{{- else }}
{{- $_ := set $jwt "jwks_file" (printf "/etc/mcp-state-guard/jwks/%s" $v.jwt.jwksConfigMap.key) }}
{{- end }}
{{- if $v.jwt.resourceMetadata }}
{{- $_ := set $jwt "resource_metadata" $v.jwt.resourceMetadata }}
{{- end }}
{{- end }}
{{- end }}

{{/* The sidecar's configuration file (TOML). */}}
{{- define "mcp-state-guard.configToml" -}}
{{- $cfg := dict }}
{{- include "mcp-state-guard.buildConfig" (dict "ctx" . "out" $cfg) }}
{{- include "mcp-state-guard.toml" $cfg }}
{{- end }}

{{/*
Checksum of what only a restart applies: the configuration without the single-use
lists and default, which the sidecar re-reads from the mounted file by itself. A change
of those lists therefore rolls no pod; any other change does. (Keys and TLS files are
re-read too, so no checksum covers them.)
*/}}
{{- define "mcp-state-guard.restartChecksum" -}}
{{- $cfg := dict }}
{{- include "mcp-state-guard.buildConfig" (dict "ctx" . "out" $cfg) }}
{{- $cold := omit (default dict $cfg.single_use) "tools" "prompts" "resources" "default" }}
{{- $cfg = omit $cfg "single_use" }}
{{- if $cold }}
{{- $_ := set $cfg "single_use" $cold }}
{{- end }}
{{- include "mcp-state-guard.toml" $cfg | sha256sum }}
{{- end }}
