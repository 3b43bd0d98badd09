{{/*
The sidecar, as named templates another chart can include to put it in front of a
server in its own workload. Each takes this chart's context: from a parent chart that
has this chart as a dependency (with workload.enabled=false, so only its ConfigMap,
Secret and monitoring objects are rendered), that is `(index .Subcharts "mcp-state-guard")`:

  containers:
    {{- include "mcp-state-guard.sidecar.container" (index .Subcharts "mcp-state-guard") | nindent 8 }}
  volumes:
    {{- include "mcp-state-guard.sidecar.volumes" (index .Subcharts "mcp-state-guard") | nindent 8 }}
  metadata.annotations:
    {{- include "mcp-state-guard.sidecar.podAnnotations" (index .Subcharts "mcp-state-guard") | nindent 8 }}
*/}}

{{/* The sidecar container (a one-element YAML list). */}}
{{- define "mcp-state-guard.sidecar.container" -}}
{{- $v := .Values -}}
- name: mcp-state-guard
  {{- if $v.stdio.enabled }}
  {{- /* stdio mode: the server's image holds the sidecar too; the server is its child. */}}
  image: {{ include "mcp-state-guard.imageRef" (dict "image" $v.server.image "defaultTag" "latest") | quote }}
  imagePullPolicy: {{ $v.server.image.pullPolicy }}
  command:
    - /usr/local/bin/mcp-state-guard
  {{- else }}
  image: {{ include "mcp-state-guard.imageRef" (dict "image" $v.image "defaultTag" .Chart.AppVersion) | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- end }}
  args:
    - run
    - --config
    - /etc/mcp-state-guard/config/mcp-state-guard.toml
  ports:
    - name: mcp
      containerPort: {{ int64 $v.ports.proxy }}
      protocol: TCP
    - name: admin
      containerPort: {{ int64 $v.ports.admin }}
      protocol: TCP
  {{- $serverEnv := and $v.stdio.enabled $v.server.env }}
  {{- if or $v.singleUse.redis.existingSecret $v.sidecar.env $serverEnv }}
  env:
    {{- if $v.singleUse.redis.existingSecret }}
    # Not in the ConfigMap: the URL may carry a password.
    - name: MCP_STATE_GUARD_SINGLE_USE__REDIS_URL
      valueFrom:
        secretKeyRef:
          name: {{ $v.singleUse.redis.existingSecret }}
          key: {{ $v.singleUse.redis.secretKey }}
    {{- end }}
    {{- with $v.sidecar.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- if $serverEnv }}
    {{- toYaml $v.server.env | nindent 4 }}
    {{- end }}
  {{- end }}
  {{- if and $v.stdio.enabled $v.server.envFrom }}
  envFrom:
    {{- toYaml $v.server.envFrom | nindent 4 }}
  {{- end }}
  startupProbe:
    httpGet:
      path: /healthz
      port: admin
    {{- toYaml $v.sidecar.startupProbe | nindent 4 }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: admin
    {{- toYaml $v.sidecar.livenessProbe | nindent 4 }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: admin
    {{- toYaml $v.sidecar.readinessProbe | nindent 4 }}
  lifecycle:
    preStop:
      # Kubernetes' own sleep action: the image has no shell to run `sleep` in.
      sleep:
        seconds: {{ int64 $v.sidecar.preStopSleepSeconds }}
  resources:
    {{- toYaml (ternary (default $v.sidecar.resources $v.server.resources) $v.sidecar.resources $v.stdio.enabled) | nindent 4 }}
  securityContext:
    {{- toYaml $v.sidecar.securityContext | nindent 4 }}
  volumeMounts:
    - name: mcp-state-guard-config
      mountPath: /etc/mcp-state-guard/config
      readOnly: true
    - name: mcp-state-guard-keys
      mountPath: /etc/mcp-state-guard/keys
      readOnly: true
    {{- if $v.tls.enabled }}
    - name: mcp-state-guard-tls
      mountPath: /etc/mcp-state-guard/tls
      readOnly: true
    {{- end }}
    {{- if and $v.jwt.enabled (not $v.jwt.jwksUrl) }}
    - name: mcp-state-guard-jwks
      mountPath: /etc/mcp-state-guard/jwks
      readOnly: true
    {{- end }}
    {{- with $v.sidecar.volumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- if $v.stdio.enabled }}
    {{- with $v.server.volumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- end }}
{{- end }}

{{/*
The sidecar's volumes (a YAML list). Whole directories, never subPath: only then do
Secret and ConfigMap updates reach the files (through kubelet's `..data` symlink swap),
which the sidecar notices by polling their content hash.
*/}}
{{- define "mcp-state-guard.sidecar.volumes" -}}
{{- $v := .Values -}}
- name: mcp-state-guard-config
  configMap:
    name: {{ include "mcp-state-guard.fullname" . }}
- name: mcp-state-guard-keys
  secret:
    secretName: {{ include "mcp-state-guard.keysSecretName" . }}
    defaultMode: 0440
    items:
      - key: {{ $v.keys.secretKey }}
        path: {{ $v.keys.secretKey }}
{{- if $v.tls.enabled }}
- name: mcp-state-guard-tls
  secret:
    secretName: {{ include "mcp-state-guard.tlsSecretName" . }}
    defaultMode: 0440
{{- end }}
{{- if and $v.jwt.enabled (not $v.jwt.jwksUrl) }}
- name: mcp-state-guard-jwks
  configMap:
    name: {{ $v.jwt.jwksConfigMap.name }}
    items:
      - key: {{ $v.jwt.jwksConfigMap.key }}
        path: {{ $v.jwt.jwksConfigMap.key }}
{{- end }}
{{- end }}

{{/* Pod annotations: the checksum of the settings that need a restart. */}}
{{- define "mcp-state-guard.sidecar.podAnnotations" -}}
checksum/mcp-state-guard-restart: {{ include "mcp-state-guard.restartChecksum" . }}
{{- end }}
