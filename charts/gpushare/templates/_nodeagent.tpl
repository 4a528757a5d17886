{{/* The node agent's DaemonSet: as a device plugin (dra false) or as the DRA driver (dra true), on
the nodes labelled for it (docs/dra.md). Arguments: dict "root" (the chart's context) "dra" (bool). */}}
{{- define "gpushare.nodeAgent" -}}
{{- $dra := .dra -}}
{{- with .root -}}
{{- $component := ternary "dra-driver" "device-plugin" $dra }}
{{- $selector := include "gpushare.deviceplugin.selectorLabels" . | replace "component: device-plugin" (printf "component: %s" $component) }}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ include "gpushare.deviceplugin.fullname" . }}{{ if $dra }}-dra{{ end }}
  namespace: {{ .Release.Namespace }}
  labels: {{- include "gpushare.labels" . | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
spec:
  selector:
    matchLabels: {{- $selector | nindent 6 }}
  # From Kubernetes 1.37 the kubelet keeps one endpoint per plugin socket, so the new plugin starts
  # beside the old one (its own socket, GPUSHARE_INSTANCE) and takes over without a moment at which
  # the node's GPU devices are unhealthy; before, the old pod stops first (docs/install.md, "Upgrade").
  # A stopping plugin answers the admissions it started before it closes.
  {{- $surge := and (not $dra) (semverCompare ">=1.37.0-0" .Capabilities.KubeVersion.Version) }}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      {{- if $surge }}
      maxSurge: 1
      maxUnavailable: 0
      {{- else }}
      maxSurge: 0
      maxUnavailable: 1
      {{- end }}
  template:
    metadata:
      labels: {{- $selector | nindent 8 }}
      {{- $annotations := merge (dict "checksum/gpushare-config" (include "gpushare.config.devicePlugin" (dict "root" . "dra" $dra) | sha256sum)) (.Values.podAnnotations | default dict) }}
      {{- if include "gpushare.nodeAgent.standby" (dict "root" . "dra" $dra) }}
      {{- /* kubectl logs/exec without -c take the plugin, not its standby. */}}
      {{- $annotations = merge (dict "kubectl.kubernetes.io/default-container" "device-plugin") $annotations }}
      {{- end }}
      {{- with $annotations }}
      annotations: {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      {{- with .Values.devicePlugin.runtimeClassName }}
      runtimeClassName: {{ . }}
      {{- end }}
      serviceAccountName: {{ include "gpushare.deviceplugin.fullname" . }}
      {{- if and (not $dra) (ne (include "gpushare.memory" . | fromJson).sampleInterval "0s") }}
      # Memory sampling: NVML reports host PIDs, and /proc/<pid>/cgroup (the host's /proc) says which
      # pod and container each belongs to; enforcement: kill signals them.
      hostPID: true
      {{- end }}
      priorityClassName: system-node-critical
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets: {{- toYaml . | nindent 8 }}
      {{- end }}
      nodeSelector: {{- toYaml (ternary (merge (dict (include "gpushare.dra.nodeLabel" .) "true") .Values.devicePlugin.nodeSelector) .Values.devicePlugin.nodeSelector $dra) | nindent 8 }}
      {{- if and .Values.dra.enabled (not $dra) }}
      # Nodes labelled {{ include "gpushare.dra.nodeLabel" . }}=true serve their cards through DRA instead (docs/dra.md).
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - {key: {{ include "gpushare.dra.nodeLabel" . }}, operator: NotIn, values: ["true"]}
      {{- end }}
      {{- with .Values.devicePlugin.tolerations }}
      tolerations: {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        {{- include "gpushare.nodeAgent.container" (dict "root" . "dra" $dra "standby" false) | nindent 8 }}
        {{- if include "gpushare.nodeAgent.standby" (dict "root" . "dra" $dra) }}
        # The standby: a second plugin on its own socket. The kubelet (1.37+) keeps both endpoints,
        # so the node's GPU devices stay healthy while either serves, and a crash of one fails no
        # pod at admission; the holder of the node lock does the node's duties (docs/install.md).
        {{- include "gpushare.nodeAgent.container" (dict "root" . "dra" $dra "standby" true) | nindent 8 }}
        {{- end }}
      volumes:
        {{- if .Values.adminAuth.enabled }}
        - name: metrics-token
          secret: {secretName: {{ include "gpushare.metricsTokenSecret" . }}}
        {{- end }}
        {{- if not .Values.devicePlugin.privileged }}
        - name: all-gpus
          hostPath: {path: /dev/null, type: CharDevice}
        {{- end }}
        {{- if $dra }}
        - name: dra-plugins
          hostPath: {path: {{ printf "%s/plugins/%s" .Values.devicePlugin.kubeletDir .Values.names.domain }}, type: DirectoryOrCreate}
        - name: dra-registry
          hostPath: {path: {{ printf "%s/plugins_registry" .Values.devicePlugin.kubeletDir }}, type: Directory}
        - name: cdi
          hostPath: {path: /var/run/cdi, type: DirectoryOrCreate}
        {{- else }}
        - name: device-plugins
          hostPath: {path: {{ printf "%s/device-plugins" .Values.devicePlugin.kubeletDir }}, type: Directory}
        - name: pod-resources
          hostPath: {path: {{ printf "%s/pod-resources" .Values.devicePlugin.kubeletDir }}, type: Directory}
        {{- end }}
        {{- if include "gpushare.recordKeySecret" . }}{{ include "gpushare.recordPublicKeyVolume" . | nindent 8 }}{{ end }}
        {{- if not $dra }}
        - name: node-state
          hostPath: {path: /var/lib/gpushare, type: DirectoryOrCreate}
        {{- end }}
        - name: config
          configMap:
            name: {{ include "gpushare.fullname" . }}-config
        {{- with .Values.devicePlugin.nodeCredential }}
        {{- if .kubeconfig }}
        # The node's own identity (the kubelet's kubeconfig and what it names), read-only.
        - name: node-kubeconfig
          hostPath: {path: {{ .kubeconfig }}, type: File}
        {{- range $i, $p := .hostPaths }}
        - name: node-credential-{{ $i }}
          hostPath: {path: {{ $p }}, type: Directory}
        {{- end }}
        {{- end }}
        {{- end }}
        {{- if .Values.devicePlugin.isolatedCards }}
        - name: isolation
          configMap:
            name: {{ include "gpushare.deviceplugin.fullname" . }}-isolation
        {{- end }}
{{- end -}}
{{- end -}}

{{/* One plugin container of the node agent's pod. Arguments: dict "root" "dra" (bool) "standby"
(bool: the standby beside the active plugin, its own socket and metrics port). */}}
{{- define "gpushare.nodeAgent.container" -}}
{{- $dra := .dra -}}
{{- $standby := .standby -}}
{{- with .root -}}
{{- $port := add (int .Values.devicePlugin.metricsPort) (ternary 1 0 $standby) }}
- name: device-plugin{{ if $standby }}-standby{{ end }}
  image: {{ include "gpushare.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: [/usr/local/bin/gpushare-device-plugin]
  {{- with .Values.devicePlugin.extraArgs }}
  args: {{- toYaml . | nindent 4 }}
  {{- end }}
  env:
    - name: NODE_NAME
      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
    {{- if $standby }}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: GPUSHARE_INSTANCE
      value: "$(POD_NAME)-standby"
    {{- else }}
    - name: GPUSHARE_INSTANCE
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    {{- end }}
    # The configuration file (templates/config.yaml; values devicePlugin.config).
    - name: GPUSHARE_CONFIG
      value: /etc/gpushare/config/{{ ternary "dra" "device-plugin" $dra }}.yaml
    - name: GPUSHARE_METRICS_ADDRESS
      value: ":{{ $port }}"
    {{- if not $dra }}
    # Only the plugin of the node that holds this lock publishes the inventory and samples and
    # enforces memory (the standby, or the old pod of a rolling update, waits for it).
    - name: GPUSHARE_NODE_LOCK_FILE
      value: /var/lib/gpushare/node-agent.lock
    {{- end }}
    {{- if $dra }}
    - name: GPUSHARE_DRA
      value: "true"
    - name: GPUSHARE_DRA_REGISTRY_DIR
      value: {{ printf "%s/plugins_registry" .Values.devicePlugin.kubeletDir | quote }}
    - name: GPUSHARE_DRA_PLUGIN_DIR
      value: {{ printf "%s/plugins/%s" .Values.devicePlugin.kubeletDir .Values.names.domain | quote }}
    {{- end }}
    {{- with .Values.devicePlugin.nodeCredential.kubeconfig }}
    # The node's own identity reads the node's pods and Node; this pod's ServiceAccount writes.
    - name: GPUSHARE_NODE_KUBECONFIG
      value: {{ . | quote }}
    {{- end }}
    # NVML needs every card's device node and the driver's utility libraries. The cards are
    # asked for the way gpushare asks for a pod's card: a volume mount named "all" under
    # /var/run/nvidia-container-devices, which the NVIDIA toolkit honours for unprivileged
    # containers (accept-nvidia-visible-devices-as-volume-mounts=true, docs/install.md),
    # while it ignores NVIDIA_VISIBLE_DEVICES=all there. So no privileged container.
    - name: NVIDIA_VISIBLE_DEVICES
      value: {{ if .Values.devicePlugin.privileged }}all{{ else }}/var/run/nvidia-container-devices{{ end }}
    - name: NVIDIA_DRIVER_CAPABILITIES
      value: utility
  securityContext:
    # Root (uid 0) without any capability: the kubelet's device-plugins and pod-resources
    # directories and sockets are root's, and their owner needs no capability to create its
    # socket or connect to the kubelet's. NVML opens the device nodes the runtime put in the
    # container's device cgroup: no capability either. Proved by the container lane
    # (docs/e2e.md, "the device plugin's own pod"). devicePlugin.privileged=true is for
    # toolkits without volume-mount device requests.
    privileged: {{ .Values.devicePlugin.privileged }}
    {{- if not .Values.devicePlugin.privileged }}
    allowPrivilegeEscalation: false
    {{- $m := include "gpushare.memory" . | fromJson }}
    {{- if and (ne (toString $m.sampleInterval) "0s") (has $m.enforcement (list "evict" "kill")) }}
    # KILL only: memory enforcement SIGKILLs an over-user's processes on the card (kill, and evict
    # when a disruption budget refuses the eviction or the pod outlives its grace).
    capabilities: {drop: [ALL], add: [KILL]}
    {{- else }}
    capabilities: {drop: [ALL]}
    {{- end }}
    readOnlyRootFilesystem: true
    seccompProfile: {type: RuntimeDefault}
    {{- end }}
    runAsUser: 0
  {{- if not $dra }}
  ports:
    - name: metrics{{ if $standby }}-standby{{ end }}
      containerPort: {{ $port }}
  # Ready once the kubelet streams the devices from this plugin (ListAndWatch open on every
  # resource it serves): a rolling update stops the old plugin only then.
  readinessProbe:
    httpGet: {path: /readyz, port: metrics{{ if $standby }}-standby{{ end }}}
    periodSeconds: 2
    failureThreshold: 1
  {{- end }}
  resources: {{- toYaml (.Values.devicePlugin.resources | default (dict "requests" (dict "cpu" "50m" "memory" "64Mi") "limits" (dict "memory" "256Mi"))) | nindent 4 }}
  volumeMounts:
    - name: config
      mountPath: /etc/gpushare/config
      readOnly: true
    {{- if .Values.adminAuth.enabled }}
    - name: metrics-token
      mountPath: /etc/gpushare/metrics-token
      readOnly: true
    {{- end }}
    {{- if not .Values.devicePlugin.privileged }}
    - name: all-gpus
      mountPath: /var/run/nvidia-container-devices/all
      readOnly: true
    {{- end }}
    {{- if $dra }}
    # The DRA driver's socket, its registration with the kubelet and the claims' CDI specs.
    - name: dra-plugins
      mountPath: {{ printf "%s/plugins/%s" .Values.devicePlugin.kubeletDir .Values.names.domain }}
    - name: dra-registry
      mountPath: {{ printf "%s/plugins_registry" .Values.devicePlugin.kubeletDir }}
    - name: cdi
      mountPath: /var/run/cdi
    {{- else }}
    - name: device-plugins
      mountPath: /var/lib/kubelet/device-plugins
    - name: pod-resources
      mountPath: /var/lib/kubelet/pod-resources
      readOnly: true
    {{- end }}
    {{- if include "gpushare.recordKeySecret" . }}{{ include "gpushare.recordKeyMount" . | nindent 4 }}{{ end }}
    {{- if not $dra }}
    - name: node-state
      mountPath: /var/lib/gpushare
    {{- end }}
    {{- with .Values.devicePlugin.nodeCredential }}
    {{- if .kubeconfig }}
    - name: node-kubeconfig
      mountPath: {{ .kubeconfig }}
      readOnly: true
    {{- range $i, $p := .hostPaths }}
    - name: node-credential-{{ $i }}
      mountPath: {{ $p }}
      readOnly: true
    {{- end }}
    {{- end }}
    {{- end }}
    {{- if .Values.devicePlugin.isolatedCards }}
    - name: isolation
      mountPath: /etc/gpushare/isolation
      readOnly: true
    {{- end }}
{{- end -}}
{{- end -}}

{{/* "true" when the node agent's pod runs a standby plugin: device-plugin mode, enabled, and a
kubelet that keeps one endpoint per socket (1.37+). Arguments: dict "root" "dra". */}}
{{- define "gpushare.nodeAgent.standby" -}}
{{- if and (not .dra) .root.Values.devicePlugin.standby.enabled (semverCompare ">=1.37.0-0" .root.Capabilities.KubeVersion.Version) }}true{{ end }}
{{- end -}}
