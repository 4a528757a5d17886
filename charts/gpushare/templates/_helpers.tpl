{{/* Names and labels shared by every template. */}}
{{- define "gpushare.name" -}}{{ .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}

{{- define "gpushare.fullname" -}}
{{- if .Values.fullnameOverride -}}{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else -}}
{{- $name := .Values.nameOverride | default .Chart.Name -}}
{{- if contains $name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpushare.labels" -}}
app.kubernetes.io/name: {{ include "gpushare.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpushare.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}

{{- define "gpushare.scheduler.fullname" -}}{{ printf "%s-scheduler" (include "gpushare.fullname" .) | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- define "gpushare.deviceplugin.fullname" -}}{{ printf "%s-device-plugin" (include "gpushare.fullname" .) | trunc 63 | trimSuffix "-" }}{{- end -}}

{{- define "gpushare.scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpushare.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end -}}

{{- define "gpushare.deviceplugin.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpushare.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: device-plugin
{{- end -}}

{{/* The same labels as a label selector (the extender's --device-plugin-selector). */}}
{{- define "gpushare.deviceplugin.selector" -}}
{{- $pairs := list -}}
{{- range $k, $v := include "gpushare.deviceplugin.selectorLabels" . | fromYaml -}}{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* The extender's URL as kube-scheduler reaches it. */}}
{{- define "gpushare.extenderURL" -}}
{{- if eq .Values.scheduler.mode "dedicated" -}}
http://127.0.0.1:39999
{{- else -}}
{{ ternary "https" "http" (include "gpushare.extenderTLS" . | eq "true") }}://{{ include "gpushare.scheduler.fullname" . }}.{{ .Release.Namespace }}.svc:39999
{{- end -}}
{{- end -}}

{{/* "true" when the extender's verbs are served over HTTPS with client certificates. */}}
{{- define "gpushare.extenderTLS" -}}
{{- and (eq .Values.scheduler.mode "extender-only") .Values.scheduler.extender.tls.enabled -}}
{{- end -}}

{{/* The extender's TLS material: a CA, the extender's serving certificate and kube-scheduler's
client certificate, generated once and kept across upgrades (lookup of the existing Secrets). A dict
of PEM strings: ca, serverCert, serverKey, clientCert, clientKey. */}}
{{- define "gpushare.extenderTLSMaterial" -}}
{{- $fullname := include "gpushare.fullname" . -}}
{{- $server := lookup "v1" "Secret" .Release.Namespace (printf "%s-extender-tls" $fullname) -}}
{{- $stanza := lookup "v1" "Secret" .Release.Namespace (printf "%s-extender-stanza" $fullname) -}}
{{- if and $server $stanza (index $server.data "ca.crt") (index $stanza.data "client.crt") -}}
{{- dict "ca" (index $server.data "ca.crt" | b64dec) "serverCert" (index $server.data "tls.crt" | b64dec) "serverKey" (index $server.data "tls.key" | b64dec) "clientCert" (index $stanza.data "client.crt" | b64dec) "clientKey" (index $stanza.data "client.key" | b64dec) | toJson -}}
{{- else -}}
{{- $days := 3650 -}}
{{- $svc := include "gpushare.scheduler.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $dns := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- $ips := list -}}
{{- range .Values.scheduler.extender.tls.extraSANs -}}
{{- if regexMatch "^[0-9.]+$|:" . }}{{ $ips = append $ips . }}{{ else }}{{ $dns = append $dns . }}{{ end -}}
{{- end -}}
{{- $ca := genCA (printf "%s-extender-ca" $fullname) $days -}}
{{- $srv := genSignedCert $svc $ips $dns $days $ca -}}
{{- $cli := genSignedCert "kube-scheduler" nil nil $days $ca -}}
{{- dict "ca" $ca.Cert "serverCert" $srv.Cert "serverKey" $srv.Key "clientCert" $cli.Cert "clientKey" $cli.Key | toJson -}}
{{- end -}}
{{- end -}}

{{/* The node-scope webhook's CA, serving certificate and key (JSON): the ones in its Secret when
it exists (kept across upgrades), else new ones for the extender Service's names and
scheduler.extender.tls.extraSANs. */}}
{{- define "gpushare.nodeScopeTLSMaterial" -}}
{{- $fullname := include "gpushare.fullname" . -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace (printf "%s-node-scope-tls" $fullname) -}}
{{- if and $old $old.data (index $old.data "ca.crt") -}}
{{- dict "ca" (index $old.data "ca.crt" | b64dec) "cert" (index $old.data "tls.crt" | b64dec) "key" (index $old.data "tls.key" | b64dec) | toJson -}}
{{- else -}}
{{- $days := 3650 -}}
{{- $svc := include "gpushare.scheduler.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $dns := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- $ips := list -}}
{{- range .Values.scheduler.extender.tls.extraSANs -}}
{{- if regexMatch "^[0-9.]+$|:" . }}{{ $ips = append $ips . }}{{ else }}{{ $dns = append $dns . }}{{ end -}}
{{- end -}}
{{- $ca := genCA (printf "%s-node-scope-ca" $fullname) $days -}}
{{- $srv := genSignedCert $svc $ips $dns $days $ca -}}
{{- dict "ca" $ca.Cert "cert" $srv.Cert "key" $srv.Key | toJson -}}
{{- end -}}
{{- end -}}

{{/* CEL: the node a request's service account token is bound to (its user extra
authentication.kubernetes.io/node-name), '' for a token bound to no node. The admission policies
that confine the device plugin's identity to its own node compare with it. */}}
{{- define "gpushare.tokenNodeCEL" -}}
has(request.userInfo.extra) && 'authentication.kubernetes.io/node-name' in request.userInfo.extra && size(request.userInfo.extra['authentication.kubernetes.io/node-name']) > 0 ? request.userInfo.extra['authentication.kubernetes.io/node-name'][0] : ''
{{- end -}}

{{/* The node label that makes a node serve its cards through DRA (value "true"). */}}
{{- define "gpushare.dra.nodeLabel" -}}{{ .Values.names.domain }}/dra{{- end -}}

{{/* The device plugin's service account as a username (the node-scope webhook's user). */}}
{{- define "gpushare.deviceplugin.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "gpushare.deviceplugin.fullname" . }}
{{- end -}}

{{/* The Secret holding the device plugins' metrics scrape token (adminAuth.enabled). */}}
{{- define "gpushare.metricsTokenSecret" -}}{{ include "gpushare.fullname" . }}-metrics-token{{- end -}}

{{/* The Secret holding the record key ("" when record signing is off). */}}
{{- define "gpushare.recordKeySecret" -}}
{{- if .Values.recordSigning.enabled -}}
{{ .Values.recordSigning.existingSecret | default (printf "%s-record-key" (include "gpushare.fullname" .)) }}
{{- end -}}
{{- end -}}

{{/* The ConfigMap the extender publishes the record keys' public halves in. */}}
{{- define "gpushare.recordPublicKeyConfigMap" -}}{{ include "gpushare.fullname" . }}-record-public-key{{- end -}}

{{/* Where both programs find their record keys (GPUSHARE_RECORD_KEY_DIR): the extender its
private keys (the Secret), the device plugin the public halves (the ConfigMap). */}}
{{- define "gpushare.recordKeyDir" -}}/etc/gpushare/record-key{{- end -}}

{{/* The record key's env entry, mount and volumes (used only when gpushare.recordKeySecret is
set): the Secret for the extender, the public-key ConfigMap for the device plugin. Whole volumes,
never a subPath: the kubelet updates them in place (an atomic swap) but never a subPath mount, and
the programs follow the update (docs/security.md). */}}
{{- define "gpushare.recordKeyEnv" -}}
- name: GPUSHARE_RECORD_KEY_DIR
  value: {{ include "gpushare.recordKeyDir" . | quote }}
{{- end -}}
{{- define "gpushare.recordKeyMount" -}}
- name: record-key
  mountPath: {{ include "gpushare.recordKeyDir" . }}
  readOnly: true
{{- end -}}
{{- define "gpushare.recordKeyVolume" -}}
- name: record-key
  secret:
    secretName: {{ include "gpushare.recordKeySecret" . }}
    defaultMode: 0444
{{- end -}}
{{- define "gpushare.recordPublicKeyVolume" -}}
- name: record-key
  configMap:
    name: {{ include "gpushare.recordPublicKeyConfigMap" . }}
{{- end -}}

{{/* The extender stanza of a KubeSchedulerConfiguration. */}}
{{- define "gpushare.extenderStanza" -}}
- urlPrefix: {{ include "gpushare.extenderURL" . }}
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  preemptVerb: preempt
  weight: 1000
  enableHTTPS: {{ include "gpushare.extenderTLS" . }}
  nodeCacheCapable: true
  ignorable: false
  httpTimeout: {{ .Values.scheduler.httpTimeout }}
  managedResources:
    - name: {{ .Values.names.resourceName }}
      ignoredByScheduler: false
    - name: {{ .Values.names.wholeResourceName }}
      ignoredByScheduler: false
{{- end -}}

{{/* The DRA scoring extender stanza (dra.scoring): prioritize only, for every pod; a pod without
claims scores 0 everywhere. */}}
{{- define "gpushare.draExtenderStanza" -}}
- urlPrefix: {{ include "gpushare.extenderURL" . }}
  prioritizeVerb: dra/prioritize
  weight: 1000
  enableHTTPS: {{ include "gpushare.extenderTLS" . }}
  nodeCacheCapable: true
  ignorable: true
  httpTimeout: {{ .Values.scheduler.httpTimeout }}
{{- end -}}

{{/* Contradictory values fail at render time, with a message that says what to change. */}}
{{- define "gpushare.validate" -}}
{{- if not (has .Values.scheduler.mode (list "dedicated" "extender-only")) -}}
{{- fail (printf "scheduler.mode must be dedicated or extender-only, not %q" .Values.scheduler.mode) -}}
{{- end -}}
{{- if and (eq .Values.scheduler.mode "extender-only") (gt (int .Values.scheduler.replicas) 1) -}}
{{- fail "extender-only mode runs one extender replica: its cache of assumed assignments is not shared between replicas (set scheduler.replicas=1)" -}}
{{- end -}}
{{- /* Values of earlier charts that are now fields of the programs' configuration files. */ -}}
{{- range $old, $new := dict "memoryUnit" "memoryUnit" "deviceListStrategy" "deviceListStrategy" "deviceIDStrategy" "deviceIDStrategy" "healthChecks" "healthChecks" "failOnInitError" "failOnInitError" "memory" "memory" -}}
{{- if hasKey $.Values.devicePlugin $old -}}
{{- fail (printf "devicePlugin.%s is now devicePlugin.config.%s (a field of the device plugin's configuration file, docs/reference/device-plugin-config.md)" $old $new) -}}
{{- end -}}
{{- end -}}
{{- range $old := list "policy" "allowedPolicies" "filterMode" "maxBestNodes" -}}
{{- if hasKey $.Values.scheduler $old -}}
{{- fail (printf "scheduler.%s is now scheduler.extender.config.%s (a field of the extender's configuration file, docs/reference/scheduler-config.md)" $old $old) -}}
{{- end -}}
{{- end -}}
{{- range $old := list "bindTimeout" "kubeAPIQPS" "kubeAPIBurst" "gcPercent" -}}
{{- if hasKey $.Values.scheduler.extender $old -}}
{{- fail (printf "scheduler.extender.%s is now scheduler.extender.config.%s (a field of the extender's configuration file, docs/reference/scheduler-config.md)" $old $old) -}}
{{- end -}}
{{- end -}}
{{- $gone := dict "scheduler.podAnnotations" "is now podAnnotations (both programs' pods)" "devicePlugin.podAnnotations" "is now podAnnotations (both programs' pods)" "scheduler.service" "is gone: the Service is a ClusterIP" "scheduler.extender.port" "is gone: the verbs listen on 39999" "scheduler.extender.adminPort" "is gone: the admin routes listen on 39998" "nodeScope.port" "is gone: the webhook listens on 39997" "devicePlugin.standby.metricsPort" "is gone: the standby's port is devicePlugin.metricsPort + 1" "dra.scoring.weight" "is gone: the weight is 1000" "scheduler.weight" "is gone: the weight is 1000, more than every default plugin together" "devicePlugin.priorityClassName" "is gone: the node agents are system-node-critical" "scheduler.kubeScheduler.image.pullPolicy" "is now image.pullPolicy (both images)" "nodeScope.validityDays" "is now scheduler.extender.tls.validityDays (every certificate the chart generates)" "serviceAccount" "is gone: rbac.create also creates the service accounts" "nodeScope.extraSANs" "is now scheduler.extender.tls.extraSANs (in every certificate the chart generates)" "scheduler.kubeScheduler.leaderElection" "is gone: the dedicated kube-schedulers always elect a leader" "metrics.interval" "is gone: the monitors scrape every 30s" "devicePlugin.isolation" "is now devicePlugin.isolatedCards (indexes and UUIDs in one list)" "devicePlugin.mps" "is now devicePlugin.config.memory.mps, memory.mpsPipeDir, memory.mpsShmDir" -}}
{{- range $m := list "serviceMonitor" "podMonitor" "prometheusRule" }}{{ $_ := set $gone (printf "metrics.%s.enabled" $m) "is now metrics.prometheusOperator (the ServiceMonitor, PodMonitor and PrometheusRule together)" }}{{ end -}}
{{- $_ := set $gone "metrics.podMonitor.authorization" "is now metrics.podMonitorAuthorization" -}}
{{- $_ := set $gone "scheduler.logVerbosity" "is gone: both programs log at -v=2; add --v=N to scheduler.kubeScheduler.extraArgs or scheduler.extender.extraArgs" -}}
{{- $_ := set $gone "scheduler.extender.tls.validityDays" "is gone: the chart's certificates last 10 years; for other lifetimes let cert-manager issue them (scheduler.extender.tls.certManager)" -}}
{{- range $m := list "serviceMonitor" "podMonitor" "grafanaDashboard" "prometheusRule" }}{{ range $k := list "labels" "interval" }}{{ $_ := set $gone (printf "metrics.%s.%s" $m $k) (printf "is now metrics.%s (shared by the monitors, dashboard and rule)" $k) }}{{ end }}{{ end -}}
{{- range $path, $msg := $gone -}}
{{- $parts := splitList "." $path -}}
{{- $v := $.Values -}}
{{- range $i, $p := $parts -}}
{{- if and (kindIs "map" $v) (hasKey $v $p) -}}{{- $v = index $v $p -}}{{- if eq (add1 $i) (len $parts) -}}{{- fail (printf "%s %s" $path $msg) -}}{{- end -}}{{- else -}}{{- $v = "" -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $bind := dig "bindTimeout" "4s" (.Values.scheduler.extender.config | default dict) | toString -}}
{{- $http := .Values.scheduler.httpTimeout | toString -}}
{{- if and (regexMatch "^[0-9]+s$" $bind) (regexMatch "^[0-9]+s$" $http) -}}
{{- if ge (atoi (trimSuffix "s" $bind)) (atoi (trimSuffix "s" $http)) -}}
{{- fail (printf "scheduler.extender.config.bindTimeout (%s) must be below scheduler.httpTimeout (%s): kube-scheduler gives up on a bind at httpTimeout, and a bind that lands after that is retried as if it had failed" $bind $http) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.metrics.prometheusOperator (not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}
{{- fail "metrics.prometheusOperator=true but the cluster has no monitoring.coreos.com/v1 API (install the Prometheus operator or leave it false)" -}}
{{- end -}}
{{- if and (eq (include "gpushare.extenderTLS" .) "true") .Values.scheduler.extender.tls.certManager.enabled (not (.Capabilities.APIVersions.Has "cert-manager.io/v1")) -}}
{{- fail "scheduler.extender.tls.certManager.enabled=true but the cluster has no cert-manager.io/v1 API (install cert-manager, or leave certManager off and let the chart generate the certificates)" -}}
{{- end -}}
{{- $m := include "gpushare.memory" . | fromJson -}}
{{- if and (eq $m.sampleInterval "0s") (ne $m.enforcement "off") -}}
{{- fail (printf "devicePlugin.config.memory.enforcement %s needs memory sampling: set devicePlugin.config.memory.sampleInterval (e.g. 5s) or memory.enforcement: off" $m.enforcement) -}}
{{- end -}}
{{- end -}}

{{/*
The second kube-scheduler's image tag: the value, else the cluster's version without a vendor
suffix (v1.37.2-eks-113cf36 -> v1.37.2). Chart.yaml's kubeVersion refuses clusters outside the
supported range (docs/compatibility.md) before this renders.
*/}}
{{- define "gpushare.kubeSchedulerTag" -}}
{{- if .Values.scheduler.kubeScheduler.image.tag -}}
{{- .Values.scheduler.kubeScheduler.image.tag -}}
{{- else -}}
{{- $v := regexFind "^v[0-9]+[.][0-9]+[.][0-9]+" .Capabilities.KubeVersion.Version -}}
{{- if not $v -}}
{{- fail (printf "cannot derive the kube-scheduler image tag from the cluster version %q: set scheduler.kubeScheduler.image.tag (e.g. v1.37.2)" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- $v -}}
{{- end -}}
{{- end -}}

{{/* CEL for a container c that requests resource (the argument), and its request as a string. */}}
{{- define "gpushare.cel.asks" -}}has(c.resources) && has(c.resources.requests) && '{{ . }}' in c.resources.requests{{- end -}}
{{- define "gpushare.cel.request" -}}string(c.resources.requests['{{ . }}']){{- end -}}
