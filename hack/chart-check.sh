#!/usr/bin/env bash
# Checks the Helm chart: helm lint; helm template for both scheduler modes and a matrix of values,
# with assertions on what each renders; contradictory values must fail with their message; the
# environment the chart gives the extender and the device plugin is what those binaries read.
# With CHART_CHECK_SERVER_DRY_RUN=1 and KUBECONFIG pointing at a live API server (the e2e harness's
# cluster), every rendering is also validated by the real API: kubectl apply --dry-run=server.
set -euo pipefail
cd "$(dirname "$0")/.."

chart=charts/gpushare
# The Kubernetes version the chart is rendered for (the version the e2e control plane runs).
kube_version="${KUBE_VERSION:-$(cat hack/k8s-version)}"
helm="$(hack/tools.sh helm)"
kubectl="${KUBECTL:-kubectl}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
passed=0
failed=0

pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1: $2"; }

# render NAME ARGS... : helm template must succeed; the output is kept in $out/NAME.yaml.
render() {
  local name=$1; shift
  if "$helm" template gpushare "$chart" --kube-version "$kube_version" --namespace gpushare-system "$@" >"$out/$name.yaml" 2>"$out/$name.err"; then
    pass "render $name"
  else
    fail "render $name" "$(cat "$out/$name.err")"
  fi
}

# expect NAME PATTERN [absent] : the rendering of NAME contains (or, with "absent", lacks) PATTERN.
expect() {
  local name=$1 pattern=$2 mode=${3:-present}
  if grep -qE -- "$pattern" "$out/$name.yaml"; then
    [ "$mode" = present ] && pass "$name has /$pattern/" || fail "$name" "should not contain /$pattern/"
  else
    [ "$mode" = absent ] && pass "$name lacks /$pattern/" || fail "$name" "should contain /$pattern/"
  fi
}

# count NAME PATTERN N : the rendering of NAME has exactly N lines matching PATTERN.
count() {
  local name=$1 pattern=$2 want=$3 got
  got=$(grep -cE -- "$pattern" "$out/$name.yaml" || true)
  if [ "$got" -eq "$want" ]; then pass "$name has /$pattern/ ${want}x"; else fail "$name" "/$pattern/ ${got}x, want ${want}x"; fi
}

# refuse NAME MESSAGE ARGS... : helm template must fail and say MESSAGE.
refuse() {
  local name=$1 message=$2; shift 2
  if "$helm" template gpushare "$chart" --kube-version "$kube_version" "$@" >/dev/null 2>"$out/$name.err"; then
    fail "refuse $name" "rendered, but should have failed with: $message"
  elif grep -qF -- "$message" "$out/$name.err"; then
    pass "refuse $name"
  else
    fail "refuse $name" "failed without the message '$message': $(cat "$out/$name.err")"
  fi
}

if "$helm" lint "$chart" --kube-version "$kube_version" >"$out/lint.txt" 2>&1; then pass "helm lint"; else fail "helm lint" "$(cat "$out/lint.txt")"; fi
if "$helm" lint "$chart" --kube-version "$kube_version" --set scheduler.mode=extender-only >"$out/lint2.txt" 2>&1; then pass "helm lint extender-only"; else fail "helm lint extender-only" "$(cat "$out/lint2.txt")"; fi

render dedicated
expect dedicated 'kind: KubeSchedulerConfiguration'
expect dedicated 'urlPrefix: http://127.0.0.1:39999'
expect dedicated 'nodeCacheCapable: true'
expect dedicated 'preemptVerb: preempt'
expect dedicated 'resources: \[poddisruptionbudgets\]'
expect dedicated 'percentageOfNodesToScore: 0$'
expect dedicated 'kind: SchedulerConfiguration$'
expect dedicated 'kind: DevicePluginConfiguration$'
count dedicated 'name: GPUSHARE_CONFIG$' 3
expect dedicated 'value: /etc/gpushare/extender/scheduler.yaml$'
count dedicated 'value: /etc/gpushare/config/device-plugin.yaml$' 2
count dedicated 'checksum/gpushare-config: ' 2
expect dedicated 'name: example.com/gpu-mem'
expect dedicated "image: \"registry.k8s.io/kube-scheduler:${kube_version}\""
expect dedicated 'kind: DaemonSet'
expect dedicated 'priorityClassName: system-node-critical'
expect dedicated 'fieldPath: spec.nodeName'
expect dedicated 'name: "system:kube-scheduler"'
expect dedicated 'resources: \[pods/binding\]'
expect dedicated 'resources: \[pods/binding, bindings\]'
expect dedicated 'resources: \[pods, pods/status, pods/ephemeralcontainers, pods/resize\]'
expect dedicated 'kind: ServiceMonitor' absent
expect dedicated 'value: "127.0.0.1:39999"'
expect dedicated 'name: GPUSHARE_ADMIN_LISTEN'
expect dedicated 'path: /readyz, port: admin'
expect dedicated 'targetPort: http$' absent
expect dedicated 'bindTimeout' absent
expect dedicated 'kind: ValidatingAdmissionPolicy$'
expect dedicated 'name: gpushare-request-size$'
expect dedicated 'name: gpushare-pod-create$'
expect dedicated 'name: gpushare-pod-update$'
expect dedicated 'name: gpushare-node-update$'
expect dedicated 'name: gpushare-binding$'
expect dedicated 'in \["gpushare-scheduler"\]'
expect dedicated 'cardLimitsConfigMap: gpushare-system/gpushare-card-limits$'
expect dedicated 'resourceNames: \[gpushare-card-limits\]'
expect dedicated 'extender-tls' absent
expect dedicated 'privileged: false'
expect dedicated 'capabilities: {drop: \[ALL\]}'
expect dedicated 'mountPath: /var/run/nvidia-container-devices/all'

# What operators expect of a chart: names, annotations, extra flags, a runtime class, global values.
render conventions --set fullnameOverride=gs --set podAnnotations.team=ml \
  --set podAnnotations.backup=skip --set 'devicePlugin.extraArgs={--nvml=spec:1x16GiB}' \
  --set 'scheduler.extender.extraArgs={--log-level=4}' --set 'scheduler.kubeScheduler.extraArgs={--kube-api-qps=100}' \
  --set devicePlugin.runtimeClassName=nvidia --set global.imageRegistry=mirror.example.com
expect conventions 'name: gs-device-plugin$'
expect conventions 'name: gs-scheduler$'
expect conventions 'name: gpushare-device-plugin' absent
count conventions 'team: ml$' 2
expect conventions 'backup: skip$'
expect conventions '- --nvml=spec:1x16GiB$'
expect conventions '- --log-level=4$'
expect conventions '- "--kube-api-qps=100"$'
expect conventions 'runtimeClassName: nvidia$'
render nameoverride --set nameOverride=gpu
expect nameoverride 'app.kubernetes.io/name: gpu$'
# The device plugin hands over without a gap where the kubelet can (1.37+: one endpoint per socket).
expect dedicated 'maxSurge: 1$'
expect dedicated 'name: GPUSHARE_INSTANCE$'
expect dedicated 'path: /readyz, port: metrics'
# A standby plugin beside it (1.37+): its own socket (instance), metrics port and readiness; both
# take the node lock, so only one does the node's duties.
expect dedicated '- name: device-plugin-standby$'
expect dedicated 'value: "\$\(POD_NAME\)-standby"$'
expect dedicated 'path: /readyz, port: metrics-standby'
expect dedicated 'value: ":9403"$'
expect dedicated 'value: /var/lib/gpushare/node-agent.lock$'
expect dedicated 'kubectl.kubernetes.io/default-container: device-plugin$'
expect conventions 'kubectl.kubernetes.io/default-container: device-plugin$'
render nostandby --set devicePlugin.standby.enabled=false
expect nostandby 'device-plugin-standby' absent
expect nostandby 'kubectl.kubernetes.io/default-container' absent
expect nostandby 'value: /var/lib/gpushare/node-agent.lock$'

# The second kube-scheduler follows the cluster's version; the chart refuses versions outside the
# supported range (Chart.yaml kubeVersion, docs/compatibility.md).
kver() { # kver NAME KUBE_VERSION WANT_IMAGE_TAG ARGS...
  local name=$1 kv=$2 want=$3; shift 3
  if "$helm" template gpushare "$chart" --kube-version "$kv" --namespace gpushare-system "$@" >"$out/$name.yaml" 2>"$out/$name.err" &&
    grep -qF "image: \"registry.k8s.io/kube-scheduler:$want\"" "$out/$name.yaml"; then
    pass "$name: kube-scheduler $want on a $kv cluster"
  else
    fail "$name" "want kube-scheduler:$want on a $kv cluster: $(grep -F 'kube-scheduler:' "$out/$name.yaml" 2>/dev/null; cat "$out/$name.err")"
  fi
}
kver kube-oldest v1.35.4 v1.35.4
# Before 1.37 the kubelet keeps one endpoint per resource: no standby.
expect kube-oldest 'device-plugin-standby' absent
kver kube-vendor-suffix v1.36.3-eks-113cf36 v1.36.3
kver kube-pinned v1.37.2 v1.37.0 --set scheduler.kubeScheduler.image.tag=v1.37.0
for kv in v1.34.4 v1.38.0; do
  if "$helm" template gpushare "$chart" --kube-version "$kv" >/dev/null 2>"$out/kube-$kv.err"; then
    fail "refuse kube $kv" "rendered on an unsupported version"
  elif grep -qF '>=1.35.0-0 <1.38.0-0' "$out/kube-$kv.err"; then
    pass "refuse kube $kv (names the supported range)"
  else
    fail "refuse kube $kv" "failed without naming the range: $(cat "$out/kube-$kv.err")"
  fi
done

# Memory sampling and enforcement (defaults: sampling every 5s, evict).
expect dedicated 'hostPID: true'
expect dedicated '^    memory:' absent
expect dedicated 'value: ":9402"'
expect dedicated 'resources: \[events\]'
# pods/eviction: the plugin's ClusterRole and the policies plugin-pod-scope and plugin-pod-label.
count dedicated 'resources: \[pods/eviction\]' 3
render report --set devicePlugin.config.memory.enforcement=report
count report 'resources: \[pods/eviction\]' 2
# The pod lookup sees only what the plugin labels (no per-pod cost on others' events); the plugin's
# unlabelled events on pods and evictions are refused. Both go with pluginPodScope.
expect dedicated '^        - \{key: "gpushare.example.com/device-plugin", operator: Exists\}$'
expect dedicated "has\(object.metadata.labels\) && 'gpushare.example.com/device-plugin' in object.metadata.labels"
render plugin-pod-scope-off --set admission.pluginPodScope=false
expect plugin-pod-scope-off 'plugin-pod-scope' absent
expect plugin-pod-scope-off 'plugin-pod-label' absent
expect plugin-pod-scope-off 'name: gpushare-plugin-events$'

# Who reads the endpoints (adminAuth, default on): the extender told delegated, its service
# account bound to system:auth-delegator; the device plugin's two containers (the plugin and its
# standby) told token, with the scrape token's Secret mounted, and their service account NOT bound
# (no TokenReview/SubjectAccessReview oracle on GPU nodes); the reader ClusterRoles; the
# ServiceMonitor sends Prometheus's token, the PodMonitor the scrape token; the verbs check
# kube-scheduler's certificate name in extender-only mode.
count dedicated 'name: GPUSHARE_ADMIN_AUTH$' 0
count dedicated '^      mode: delegated$' 1
count dedicated '^      mode: token$' 1
count dedicated 'tokenFile: /etc/gpushare/metrics-token/token$' 1
count dedicated 'mountPath: /etc/gpushare/metrics-token$' 2
expect dedicated 'name: gpushare-metrics-token$'
expect dedicated 'name: "system:auth-delegator"'
count dedicated '\{kind: ServiceAccount, name: gpushare-device-plugin, namespace: gpushare-system\}' 1
expect dedicated 'nonResourceURLs: \[/metrics\]'
expect dedicated 'nonResourceURLs: \[/inspect, /inspect/\*\]'
render admin-auth-off --set adminAuth.enabled=false
count admin-auth-off '^      mode: none$' 2
expect admin-auth-off 'system:auth-delegator' absent
expect admin-auth-off 'metrics-token' absent

# The device plugin reads its node's pods and Node with the node's own identity (the kubelet's
# kubeconfig, read-only), so its ServiceAccount reads neither; nodeCredential.kubeconfig="" gives
# the reads back to the ServiceAccount and mounts nothing of the node's.
count dedicated 'name: GPUSHARE_NODE_KUBECONFIG$' 2
count dedicated 'hostPath: \{path: /etc/kubernetes/kubelet.conf, type: File\}' 1
count dedicated 'mountPath: /var/lib/kubelet/pki$' 2
count dedicated 'verbs: \[patch\]$' 2
render node-credential-off --set devicePlugin.nodeCredential.kubeconfig=
expect node-credential-off 'GPUSHARE_NODE_KUBECONFIG' absent
expect node-credential-off 'kubelet/pki' absent
count node-credential-off 'verbs: \[get, list, watch, patch\]$' 2

# Tenant isolation: the extender off GPU nodes by default (an own affinity or avoidGPUNodes=false
# lifts it); Node records only the node's plugin's; privileged pods refused outside allowed
# namespaces (kube-system by default); device requests through the toolkit's mount rule refused.
expect dedicated '\{key: "gpushare", operator: NotIn, values: \["true"\]\}'
expect dedicated '\{key: nvidia.com/gpu.present, operator: NotIn, values: \["true"\]\}'
render extender-on-gpu-nodes --set scheduler.avoidGPUNodes=false
expect extender-on-gpu-nodes 'gpu.present' absent
expect dedicated 'name: gpushare-node-records$'
expect dedicated 'name: gpushare-privileged$'
expect dedicated 'values: \["gpushare-system","kube-system"\]'
expect dedicated "m.mountPath.contains\('nvidia-container-devices'\)"
render privileged-allowed --set admission.privilegedPods.refuse=false
expect privileged-allowed 'gpushare-privileged' absent
expect privileged-allowed 'name: gpushare-device-access$'
render servicemonitor-noauth --set adminAuth.enabled=false --set metrics.prometheusOperator=true --api-versions monitoring.coreos.com/v1
expect servicemonitor-noauth 'bearerTokenFile' absent
render servicemonitor-auth --set metrics.prometheusOperator=true --api-versions monitoring.coreos.com/v1
expect servicemonitor-auth 'bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token'
render admin-readers --set 'adminAuth.metricsReaders[0].kind=ServiceAccount' --set 'adminAuth.metricsReaders[0].name=prometheus-k8s' --set 'adminAuth.metricsReaders[0].namespace=monitoring'
expect admin-readers 'name: prometheus-k8s'
render client-names --set scheduler.mode=extender-only --set 'scheduler.extender.tls.clientNames={gpushare-kube-scheduler}'
expect client-names 'clientCertNames:$'
expect client-names '^    - gpushare-kube-scheduler$'
expect dedicated 'clientCertNames' absent
render placement --set scheduler.priorityClassName=gpushare-system --set scheduler.nodeSelector.pool=system
expect placement 'priorityClassName: gpushare-system'
expect dedicated 'priorityClassName: system-cluster-critical'

# Card pinning by UUID (cardChoice.uuidPinning, default namespaces-labelled).
expect dedicated 'name: gpushare-card-pinning$'
expect dedicated "namespaceObject.metadata.labels\['gpushare.example.com/card-pinning'\] == 'allowed'"
render pinning-everyone --set cardChoice.uuidPinning=everyone
expect pinning-everyone 'card-pinning' absent
render pinning-nobody --set cardChoice.uuidPinning=nobody
expect pinning-nobody 'name: gpushare-card-pinning$'
expect pinning-nobody 'namespaceObject.metadata.labels' absent
expect dedicated 'mps' absent

# Record signing (default on): the chart's generated private key Secret, mounted read-only (no
# subPath, so that a rotation reaches the running programs) into the extender only; the device
# plugin mounts the public-key ConfigMap the extender writes; both told where by
# the extender's --record-key-dir (GPUSHARE_RECORD_KEY_DIR) and the plugins' recordKeyDir.
expect dedicated 'name: gpushare-record-key$'
expect dedicated '^  current: [A-Za-z0-9+/=]{80,}$'
count dedicated 'name: GPUSHARE_RECORD_KEY_DIR$' 1
count dedicated 'value: "/etc/gpushare/record-key"$' 1
count dedicated 'recordKeyDir: /etc/gpushare/record-key$' 1
count dedicated 'mountPath: /etc/gpushare/record-key$' 3
count dedicated 'secretName: gpushare-record-key$' 1
count dedicated 'name: gpushare-record-public-key$' 2
expect dedicated 'recordPublicKeyConfigMap: gpushare-system/gpushare-record-public-key$'
expect dedicated 'subPath' absent

render record-key-existing --set recordSigning.existingSecret=team-record-key
expect record-key-existing 'name: gpushare-record-key$' absent
count record-key-existing 'secretName: team-record-key$' 1
count record-key-existing 'name: GPUSHARE_RECORD_KEY_DIR$' 1

render record-key-extender-only --set scheduler.mode=extender-only
count record-key-extender-only 'mountPath: /etc/gpushare/record-key$' 3
expect record-key-extender-only 'mountPath: /etc/gpushare/tls$'

render record-signing-off --set recordSigning.enabled=false
expect record-signing-off 'RECORD_KEY|-record-key|record-key$' absent

render evict --set devicePlugin.config.memory.enforcement=evict --set devicePlugin.config.memory.tolerance=512Mi
expect evict 'resources: \[pods/eviction\]'
expect evict 'tolerance: 512Mi$'

render memory-off --set devicePlugin.config.memory.enforcement=off --set devicePlugin.config.memory.sampleInterval=0s
expect memory-off 'hostPID: true' absent
# Without enforcement the plugin still says in an Event on the Node why it does not register
# beside another GPU device plugin.
expect memory-off 'resources: \[events\]'

render mps --set devicePlugin.config.memory.mps=true --set devicePlugin.config.memory.mpsShmDir=/run/mps/shm
expect mps '^      mps: true$'
expect mps 'mpsShmDir: /run/mps/shm$'

render podmonitor --set metrics.prometheusOperator=true --api-versions monitoring.coreos.com/v1
expect podmonitor 'kind: PodMonitor'
expect podmonitor '- port: metrics'
count podmonitor 'credentials: \{name: gpushare-metrics-token, key: token\}' 2

render observability --set metrics.grafanaDashboard.enabled=true --set metrics.prometheusOperator=true --api-versions monitoring.coreos.com/v1
expect observability 'kind: PrometheusRule'
expect observability 'alert: GPUShareContainerOverMemoryGrant'
expect observability 'grafana_dashboard: "1"'
expect observability '"uid": "gpushare-memory"'
expect dedicated 'kind: PrometheusRule' absent

render extender-only --set scheduler.mode=extender-only
expect extender-only 'kind: KubeSchedulerConfiguration' absent
expect extender-only 'name: kube-scheduler$' absent
expect extender-only 'system:kube-scheduler' absent
expect extender-only 'kind: Service$'
expect extender-only 'value: ":39999"'
expect extender-only 'clientCertNames:$'
expect extender-only 'targetPort: http$'
expect extender-only 'in \["default-scheduler"\]'
expect extender-only 'name: gpushare-extender-tls$'
expect extender-only 'name: gpushare-extender-stanza$'
expect extender-only 'name: GPUSHARE_CLIENT_CA_FILE'
expect extender-only 'secretName: gpushare-extender-tls'

# cert-manager issues the certificates instead (rendering only: the test API server has no
# cert-manager CRDs, so this rendering stays out of the server dry-run below).
render cert-manager --set scheduler.mode=extender-only --set scheduler.extender.tls.certManager.enabled=true \
  --set 'scheduler.extender.tls.extraSANs={127.0.0.1,ext.example.com}' --api-versions cert-manager.io/v1
count cert-manager 'kind: Certificate$' 3
count cert-manager 'kind: Issuer$' 2
expect cert-manager 'selfSigned: \{\}'
expect cert-manager 'isCA: true'
expect cert-manager 'secretName: gpushare-extender-tls$'
expect cert-manager 'secretName: gpushare-extender-client$'
expect cert-manager '- gpushare-scheduler.gpushare-system.svc$'
expect cert-manager '- ext.example.com$'
expect cert-manager '- 127.0.0.1$'
expect cert-manager 'usages: \[client auth'
expect cert-manager 'name: GPUSHARE_CLIENT_CA_FILE'
expect cert-manager 'name: gpushare-extender-stanza$' absent
expect cert-manager 'type: kubernetes.io/tls' absent
render cert-manager-issuer --set scheduler.mode=extender-only --set scheduler.extender.tls.certManager.enabled=true \
  --set scheduler.extender.tls.certManager.issuerRef.name=corp-ca --set scheduler.extender.tls.certManager.issuerRef.kind=ClusterIssuer --api-versions cert-manager.io/v1
count cert-manager-issuer 'kind: Certificate$' 2
expect cert-manager-issuer 'kind: Issuer$' absent
count cert-manager-issuer 'issuerRef: \{name: corp-ca, kind: ClusterIssuer' 2
expect extender-only 'cert-manager.io' absent

render extender-only-plain --set scheduler.mode=extender-only --set scheduler.extender.tls.enabled=false
expect extender-only-plain 'extender-tls' absent
expect extender-only-plain 'GPUSHARE_TLS_CERT_FILE' absent

render every-node --set scheduler.kubeScheduler.percentageOfNodesToScore=100 --set scheduler.extender.config.maxBestNodes=1
expect every-node 'percentageOfNodesToScore: 100$'
expect every-node 'maxBestNodes: 1$'

render ha --set scheduler.replicas=2
expect ha 'replicas: 2'
expect ha 'leaderElect: true'
expect ha 'kind: Lease|resources: \[leases\]'

render strategies --set devicePlugin.config.deviceListStrategy=envvar --set devicePlugin.config.deviceIDStrategy=index \
  --set devicePlugin.config.memoryUnit=MiB --set devicePlugin.config.healthChecks=false
expect strategies 'deviceListStrategy: envvar$'
expect strategies 'deviceIDStrategy: index$'
expect strategies 'memoryUnit: MiB$'
expect strategies 'unhealthyDevices.json' absent

render isolation --set 'devicePlugin.isolatedCards={1,3,GPU-0000aaaa}'
expect isolation 'unhealthyDevices.json: .*index.*\[1,3\].*uuid.*GPU-0000aaaa'
expect isolation 'isolationFile: /etc/gpushare/isolation/unhealthyDevices.json$'

render privileged-plugin --set devicePlugin.privileged=true
expect privileged-plugin 'privileged: true'
expect privileged-plugin 'value: all$'
expect privileged-plugin 'nvidia-container-devices/all' absent

# The extender's GC target: the program's gcPercent (400) unless scheduler.extender.config says.
expect dedicated 'GOGC' absent
render gc-percent --set scheduler.extender.config.gcPercent=150
expect gc-percent 'gcPercent: 150$'
refuse gc-percent-low 'gcPercent' --set scheduler.extender.config.gcPercent=5

render allowed-policies --set 'scheduler.extender.config.allowedPolicies={spread,frag}'
expect allowed-policies '^    - spread$'
expect dedicated 'allowedPolicies' absent

render no-deviceplugin --set devicePlugin.enabled=false
expect no-deviceplugin 'kind: DaemonSet' absent

render networkpolicy --set scheduler.mode=extender-only --set scheduler.networkPolicy.enabled=true \
  --set 'scheduler.networkPolicy.adminFrom[0].namespaceSelector.matchLabels.team=monitoring'
expect networkpolicy 'kind: NetworkPolicy'
expect networkpolicy 'port: 39999, protocol: TCP'
expect networkpolicy 'port: 39998, protocol: TCP'
expect networkpolicy 'team: monitoring'
expect dedicated 'kind: NetworkPolicy' absent

# Names are configuration: Alibaba's resource name and another domain reach the scheduler's
# managed resources, both programs' environment and the admission policies; the default names
# are gone from every one of them.
render alibaba --set names.resourceName=aliyun.com/gpu-mem --set names.wholeResourceName=acme.io/gpu --set names.domain=gpushare.acme.io
expect alibaba '- name: aliyun.com/gpu-mem$'
expect alibaba '- name: acme.io/gpu$'
count alibaba 'resourceName: aliyun.com/gpu-mem$' 2
count alibaba 'domain: gpushare.acme.io$' 2
expect alibaba "'aliyun.com/gpu-mem' in c.resources.requests"
expect alibaba "'gpushare.acme.io/assignment' in object.metadata.annotations"
expect alibaba "k == 'gpushare.acme.io/inventory'"
if grep 'example.com' "$out/alibaba.yaml" | grep -qv "apiVersion: gpushare.example.com/v1alpha1$"; then fail alibaba "a default name is left"; else pass "alibaba has no default name (the configuration files' apiVersion aside)"; fi
count dedicated 'resourceName: example.com/gpu-mem$' 2
refuse bad-resource-name 'resourceName' --set names.resourceName=gpu-mem
refuse bad-domain 'domain' --set names.domain=Not_A_Domain

render no-admission --set admission.enabled=false
expect no-admission 'kind: ValidatingAdmissionPolicy' absent
expect no-admission 'cardLimitsConfigMap' absent
expect no-admission 'card-limits' absent

# The node-scope webhook (nodeScope.enabled): the extender serves it with the chart's certificate for
# the device plugin's user; the API server's entry and kubeconfig are in a Secret.
render node-scope --set nodeScope.enabled=true --set 'scheduler.extender.tls.extraSANs={10.0.0.10}' --set nodeScope.serverURL=https://10.0.0.10:39997/authorize
expect node-scope 'name: GPUSHARE_NODE_SCOPE_LISTEN'
expect node-scope '^      - system:serviceaccount:gpushare-system:gpushare-device-plugin$'
expect node-scope "request.user == 'system:serviceaccount:gpushare-system:gpushare-device-plugin'"
expect node-scope 'server: https://10.0.0.10:39997/authorize'
expect node-scope 'failurePolicy: Deny'
expect node-scope 'name: gpushare-node-scope-tls'
expect node-scope 'targetPort: node-scope'
expect dedicated 'GPUSHARE_NODE_SCOPE' absent
expect dedicated 'name: gpushare-node-scope' absent
refuse bad-node-scope-url 'serverURL' --set nodeScope.enabled=true --set nodeScope.serverURL=http://10.0.0.10/authorize

# DRA (dra.enabled): the DeviceClass, a second node-agent DaemonSet in DRA mode on the nodes labelled
# <domain>/dra=true (the device plugin's DaemonSet avoids them), its RBAC and slice policy; the
# extender reads the slices and claims (GPUSHARE_DRA, list and watch on them) for /inspect and the
# DRA prioritize verb, which the dedicated scheduler's configuration names (dra.scoring).
render dra --set dra.enabled=true
render dra-noscore --set dra.enabled=true --set dra.scoring.enabled=false
expect dra 'kind: DeviceClass'
expect dra 'expression: device.driver == "gpushare.example.com"'
expect dra 'name: gpushare-device-plugin-dra'
expect dra 'app.kubernetes.io/component: dra-driver'
expect dra 'gpushare.example.com/dra: "true"'
expect dra 'key: gpushare.example.com/dra, operator: NotIn'
expect dra 'name: GPUSHARE_DRA$'
expect dra 'mountPath: /var/lib/kubelet/plugins/gpushare.example.com'
expect dra 'resources: \[resourceslices\]'
expect dra 'name: gpushare-plugin-resourceslices'
expect dra 'name: gpushare-claim-memory'
expect dra "'gpushare.example.com/claim-memory-max' in namespaceObject.metadata.annotations"
count dra 'name: GPUSHARE_DRA$' 1
expect dra '^    dra: true$'
expect dra 'cdiDir: /var/run/cdi$'
expect dra 'value: /etc/gpushare/config/dra.yaml$'
expect dra 'prioritizeVerb: dra/prioritize'
expect dra-noscore 'prioritizeVerb: dra/prioritize' absent
expect dra-noscore 'name: GPUSHARE_DRA$'
expect dra 'resources: \[resourceslices, resourceclaims\]'
count dra 'kind: DaemonSet' 2
expect dedicated 'kind: DeviceClass' absent
expect dedicated 'GPUSHARE_DRA' absent
expect dedicated 'resourceslices' absent
expect dedicated 'dra/prioritize' absent

render servicemonitor --set metrics.prometheusOperator=true --api-versions monitoring.coreos.com/v1
expect servicemonitor 'kind: ServiceMonitor'
expect servicemonitor '- port: admin'

refuse bad-mode '/scheduler/mode' --set scheduler.mode=primary
refuse extender-only-replicas 'extender-only mode runs one extender replica' --set scheduler.mode=extender-only --set scheduler.replicas=2
refuse gone-election 'scheduler.kubeScheduler.leaderElection is gone' --set scheduler.kubeScheduler.leaderElection=false
refuse enforcement-without-sampling 'needs memory sampling' --set devicePlugin.config.memory.sampleInterval=0s
refuse bad-enforcement 'enforcement' --set devicePlugin.config.memory.enforcement=delete
refuse moved-value 'devicePlugin.memoryUnit is now devicePlugin.config.memoryUnit' --set devicePlugin.memoryUnit=MiB
refuse moved-scheduler-value 'scheduler.policy is now scheduler.extender.config.policy' --set scheduler.policy=spread
refuse gone-value 'nodeScope.port is gone' --set nodeScope.port=1
refuse prometheus-operator-without-crd 'no monitoring.coreos.com/v1 API' --set metrics.prometheusOperator=true
refuse gone-servicemonitor 'metrics.serviceMonitor.enabled is now metrics.prometheusOperator' --set metrics.serviceMonitor.enabled=true
refuse bad-unit 'memoryUnit' --set devicePlugin.config.memoryUnit=KiB
refuse bad-isolation-uuid 'isolatedCards' --set 'devicePlugin.isolatedCards={card0}'
refuse unknown-value 'additional properties' --set scheduler.polcy=spread
refuse bad-record-key-secret 'existingSecret' --set recordSigning.existingSecret=Not_A_Name
refuse cert-manager-without-crd 'no cert-manager.io/v1 API' --set scheduler.mode=extender-only --set scheduler.extender.tls.certManager.enabled=true
refuse bad-allowed-policy 'allowedPolicies' --set 'scheduler.extender.config.allowedPolicies={Spread Mode}'
refuse bind-timeout-past-http-timeout 'must be below scheduler.httpTimeout' --set scheduler.extender.config.bindTimeout=5s

# The environment the chart gives each program must be what the program reads, with values it
# accepts: every variable (GPUSHARE_*, NODE_NAME, KUBECONFIG) of the extender and device-plugin
# containers must be named in that binary's --help, and the binary started with exactly that
# environment must get past its option checks (exit 1: no cluster here) instead of refusing a value
# (exit 2).
go build -o "$out/gpushare-scheduler" ./scheduler
go build -o "$out/gpushare-device-plugin" ./deviceplugin
# container_env NAME CONTAINER : "VAR=value" lines of CONTAINER's env in rendering NAME
# (a valueFrom, i.e. the downward API's node name, becomes chart-check-node).
container_env() {
  awk -v want="$2" '/^        - name: /{c=$3} c==want && /^            - name: /{n=$3; getline;
    if ($1=="valueFrom:") v="chart-check-node"; else { sub(/^ *value: */,""); gsub(/^"|"$/,""); v=$0 }
    if (n ~ /^(GPUSHARE_|NODE_NAME$|KUBECONFIG$)/) print n "=" v}' "$out/$1.yaml"
}
# The record key the chart mounts at GPUSHARE_RECORD_KEY_DIR (and names in the configuration
# files) is a directory made here instead.
keydir="$out/record-key"
mkdir -p "$keydir"
openssl genpkey -algorithm ed25519 >"$keydir/current"
# So is the node's kubeconfig the chart mounts from the host at GPUSHARE_NODE_KUBECONFIG.
nodekubeconfig="$out/node.kubeconfig"
printf 'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n' >"$nodekubeconfig"
# config_file NAME KEY : the configuration file KEY of rendering NAME's ConfigMap, written to a
# file (the record key directory and node state replaced by this script's); prints its path.
config_file() {
  local f="$out/configs/$1-$2" # not beside the renderings: the server dry-run applies those
  mkdir -p "$out/configs"
  awk -v key="  $2: |" '$0==key{on=1; next} on && /^    /{sub(/^    /,""); print; next} on{exit}' "$out/$1.yaml" |
    sed -e "s|/etc/gpushare/record-key|$keydir|" -e "s|/var/lib/gpushare/|$out/|" >"$f"
  echo "$f"
}
# with_config NAME : vars' GPUSHARE_CONFIG points at the configuration file of rendering NAME.
with_config() {
  local i
  for i in "${!vars[@]}"; do
    case "${vars[$i]}" in GPUSHARE_CONFIG=*) vars[$i]="GPUSHARE_CONFIG=$(config_file "$1" "${vars[$i]##*/}")" ;; esac
  done
}
check_program_env() {
  local name=$1 container=$2 binary=$3 help vars v code
  help="$("$out/$binary" --help)"
  mapfile -t vars < <(container_env "$name" "$container" | sed "s|^GPUSHARE_RECORD_KEY_DIR=.*|GPUSHARE_RECORD_KEY_DIR=$keydir|; s|^GPUSHARE_NODE_KUBECONFIG=.*|GPUSHARE_NODE_KUBECONFIG=$nodekubeconfig|")
  with_config "$name"
  if [ "${#vars[@]}" -eq 0 ]; then fail "$name $container env" "no variables found in the rendering"; return; fi
  for v in "${vars[@]}"; do
    if grep -qF "(env ${v%%=*})" <<<"$help"; then pass "$name $container reads ${v%%=*}"
    else fail "$name $container env" "the chart sets ${v%%=*}, which $binary --help does not name"; fi
  done
  code=0
  env -i PATH="$PATH" "${vars[@]}" timeout 20 "$out/$binary" >"$out/$name-$container.run" 2>&1 || code=$?
  if [ "$code" -eq 1 ]; then pass "$name $container accepts the chart's values"
  else fail "$name $container values" "exit $code, want 1 (past the option checks, no cluster): $(cat "$out/$name-$container.run")"; fi
}
for r in dedicated strategies isolation record-key-existing record-signing-off allowed-policies alibaba node-scope dra; do
  check_program_env "$r" extender gpushare-scheduler
  check_program_env "$r" device-plugin gpushare-device-plugin
done
# Both programs do read GPUSHARE_RECORD_KEY_DIR: pointed at a directory without a key, they refuse
# to start (exit 2) and say so.
for prog in "extender gpushare-scheduler" "device-plugin gpushare-device-plugin"; do
  set -- $prog
  mapfile -t vars < <(container_env dedicated "$1" | sed "s|^GPUSHARE_RECORD_KEY_DIR=.*|GPUSHARE_RECORD_KEY_DIR=$out/no-key|")
  with_config dedicated
  sed -i "s|$keydir|$out/no-key|" "$out"/configs/dedicated-*.yaml
  code=0
  env -i PATH="$PATH" "${vars[@]}" timeout 20 "$out/$2" >"$out/nokey-$1.run" 2>&1 || code=$?
  if [ "$code" -eq 2 ] && grep -qE -- '--record-key-dir|recordKeyDir' "$out/nokey-$1.run"; then pass "$1 refuses a record key directory without a key"
  else fail "$1 record key" "exit $code, want 2 naming the record key directory: $(cat "$out/nokey-$1.run")"; fi
done

if [ "${CHART_CHECK_SERVER_DRY_RUN:-0}" = 1 ]; then
  "$kubectl" create namespace gpushare-system --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
  for f in "$out"/*.yaml; do
    name=$(basename "$f" .yaml)
    case "$name" in servicemonitor*|podmonitor|observability|cert-manager*) continue ;; esac   # no Prometheus operator or cert-manager CRDs on the test cluster
    if "$kubectl" apply --dry-run=server -f "$f" >"$out/$name.dry" 2>&1; then
      pass "server dry-run $name"
    else
      fail "server dry-run $name" "$(cat "$out/$name.dry")"
    fi
  done
fi

echo "chart: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
