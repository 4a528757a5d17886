#!/usr/bin/env bash
# Derives a heterogeneous GPU-memory (GiB) workload from Alibaba's openb default trace, in
# gpushare-simulate's memory format (docs/packing.md, "A heterogeneous GiB workload"):
#   nodes: the openb cluster, each model given a card size in GiB (MODEL_GIB below);
#   pods:  the openb default pods, a share of one card becoming an absolute size,
#          round(gpu_milli / 1000 × REF_GIB) GiB (at least 1); whole-card and CPU-only pods unchanged.
# Usage: hack/openb-to-gib.sh [OPENB_DIR] [OUT_DIR]   (defaults: the repository's traces)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
in="${1:-$root/scheduler/simulate/traces/openb}"
out="${2:-$root/scheduler/simulate/traces/gib}"
REF_GIB=40 # about the cluster's mean card (42 GiB)
# openb's models; G2 and G3 are anonymised in the trace: sized here as a 48 GiB and an 80 GiB card.
MODEL_GIB="P100=16 T4=16 V100M16=16 V100M32=32 A10=24 G2=48 G3=80"
mkdir -p "$out"
awk -F, -v OFS=, -v sizes="$MODEL_GIB" '
	BEGIN { n = split(sizes, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); gib[p[1]] = p[2] } }
	NR == 1 { print "name,cpu_milli,memory_mib,gpu,model,card_gib"; next }
	{ if (!($5 in gib)) { print "openb-to-gib: no size for model " $5 > "/dev/stderr"; exit 1 }
	  print $1, $2, $3, $4, $5, gib[$5] }
' "$in/openb_node_list_gpu_node.csv" >"$out/openb_gib_nodes.csv"
awk -F, -v OFS=, -v ref="$REF_GIB" '
	NR == 1 { print "name,cpu_milli,memory_mib,num_gpu,gpu_gib,gpu_spec"; next }
	{ g = 0
	  if ($4 == 1) { g = int($5 / 1000 * ref + 0.5); if (g < 1) g = 1 }
	  print $1, $2, $3, $4, g, $6 }
' "$in/openb_pod_list_default.csv" >"$out/openb_gib_pods.csv"
echo "wrote $out/openb_gib_nodes.csv ($(($(wc -l <"$out/openb_gib_nodes.csv") - 1)) nodes) and $out/openb_gib_pods.csv ($(($(wc -l <"$out/openb_gib_pods.csv") - 1)) pods)"
