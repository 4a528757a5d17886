#!/usr/bin/env bash
# docs-check: every make target, program flag, metric and annotation key that the user docs
# (README.md, docs/*.md) name exists in the code. Part of `make test` (`make docs-check`).
#
#   make target  `make foo` in inline code or a code block   -> a rule "foo:" in the Makefile
#   flag         `--foo` in inline code or a code block      -> a flag in the --help of
#                gpushare-scheduler, gpushare-device-plugin or kubectl-inspect-gpushare (built
#                here), unless listed below as another program's flag
#   metric       gpushare_foo anywhere (a histogram's _bucket/_sum/_count too)
#                                                             -> the string "gpushare_foo" in Go code
#   key          gpushare.example.com/foo anywhere           -> n.key("foo") or a key* constant in api/names.go
#
# Then it checks itself: hack/testdata/docs-check-broken.md names one missing name of each kind,
# and each must be reported. DOCS="a.md b.md" checks other files instead of the user docs.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
read -r -a docs <<<"${DOCS:-README.md $(echo docs/*.md)}"
broken=hack/testdata/docs-check-broken.md

# Flags the docs name that belong to other programs. A flag of ours missing from a --help is
# never to be added here: fix the doc.
external="
--replicas --dry-run --all-containers --prefix --overwrite --type --ignore-daemonsets --delete-emptydir-data --ignore-not-found --all --verb --resource
--create-namespace --reuse-values --wait --install
--endpoint-reconciler-type --authorization-config
--write-config-to
--scheduler-config --extender-url
--clean
--labels --plugin --leave-plugin-running --no-device-manager --state-dir --plugin-pod-namespace --plugin-pod-labels --plugin-restart-delay --node-status-update-frequency --plugin-standby
--in-place --set
--gpu-memory-utilization
--name
--claim-gib --runc --nvidia-ctk --nvidia-runtime
"
# (by line: kubectl; helm; kube-apiserver; kube-scheduler; hack/cluster.sh; hack/playground.sh;
#  test/nodeagent; nvidia-ctk; vLLM; design.md's example of pflag's syntax, --name=value;
#  bin/gpu-proof, the real-GPU proof (test/gpuproof))

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- what exists
grep -oE '^[a-zA-Z0-9_-]+:' Makefile | tr -d : | sort -u >"$tmp/targets"

$GO build -o "$tmp/bin/" ./scheduler ./deviceplugin ./inspector
for b in scheduler deviceplugin inspector; do
	"$tmp/bin/$b" --help 2>&1 | grep -oE -- '--[a-z][a-z0-9_-]*' || true
done | sort -u >"$tmp/flags"
tr -s ' \n' '\n\n' <<<"$external" | { grep . || true; } >>"$tmp/flags"

git ls-files '*.go' | grep -v '_test\.go$' | xargs grep -ohE '"gpushare_[a-z0-9_]+"' | tr -d '"' | sort -u >"$tmp/metrics"
# (into another file first: sed reading the file it appends to never ends once the list outgrows its buffer)
for s in bucket sum count; do sed "s/\$/_$s/" "$tmp/metrics"; done >"$tmp/suffixed"
cat "$tmp/suffixed" >>"$tmp/metrics"

# Keys are derived from the configured domain in api/names.go: n.key("foo") and the key* constants.
grep -ohE '(n\.key\("[a-z0-9.-]+"\)|key[A-Za-z]+ += "[a-z0-9.-]+")' api/*.go | grep -oE '"[^"]+"' | tr -d '"' |
	sed 's|^|gpushare.example.com/|' | sort -u >"$tmp/keys"

# code FILE...: "file:line:text" for the text of every inline code span and code-block line.
code() {
	awk '
		FNR == 1 { fence = 0 }
		/^[[:space:]]*```/ { fence = !fence; next }
		fence { print FILENAME ":" FNR ":" $0; next }
		{
			line = $0
			while (match(line, /`[^`]+`/)) {
				print FILENAME ":" FNR ":" substr(line, RSTART + 1, RLENGTH - 2)
				line = substr(line, RSTART + RLENGTH)
			}
		}' "$@"
}

# names PATTERN: "file:line:name" for every match of PATTERN in the text of "file:line:text"
# lines; the name is the match's last word, less anything before "--" or "make ".
names() {
	awk -F: -v re="$1" '{
		text = substr($0, length($1) + length($2) + 3)
		while (match(text, re)) {
			n = split(substr(text, RSTART, RLENGTH), w, " ")
			name = w[n]
			if (index(name, "--") > 1) name = substr(name, index(name, "--"))
			print $1 ":" $2 ":" name
			text = substr(text, RSTART + RLENGTH)
		}
	}'
}

# missing LIST: the "file:line:name" lines of stdin whose name is not a line of LIST.
missing() { awk -F: 'NR == FNR { known[$0] = 1; next } !($3 in known)' "$1" -; }

# check FILE...: print one line per name the files use that does not exist.
check() {
	code "$@" >"$tmp/code"
	names '(^|[^a-zA-Z0-9_-])make( [A-Z_]+=[^ ]*)* [a-z][a-z0-9_-]*' <"$tmp/code" | missing "$tmp/targets" |
		awk -F: '{print $1 ":" $2 " names `make " $3 "`, which the Makefile does not define"}'
	names '(^|[^a-zA-Z0-9-])--[a-z][a-z0-9-]*' <"$tmp/code" | missing "$tmp/flags" |
		awk -F: '{print $1 ":" $2 " names the flag " $3 ", which no gpushare program has (nor another program listed in hack/docs-check.sh)"}'
	{ grep -noE 'gpushare_[a-z0-9_]+' "$@" /dev/null || true; } | missing "$tmp/metrics" |
		awk -F: '{print $1 ":" $2 " names the metric " $3 ", which no program exports"}'
	{ grep -noE 'gpushare\.example\.com/[a-z0-9.-]*[a-z0-9]' "$@" /dev/null || true; } | missing "$tmp/keys" |
		awk -F: '{print $1 ":" $2 " names the key " $3 ", which api/ does not define"}'
}

fail=0
check "${docs[@]}" >"$tmp/found"
if [ -s "$tmp/found" ]; then
	sed 's/^/docs-check: /' "$tmp/found"
	fail=1
else
	echo "docs-check: ${#docs[@]} files: every make target, flag, metric and key they name exists"
fi

# The check must see what is broken in $broken: one name of each kind.
check "$broken" >"$tmp/self"
for kind in '`make ' 'the flag ' 'the metric ' 'the key '; do
	if ! grep -qF "names $kind" "$tmp/self"; then
		echo "docs-check: self-test: $broken names something missing that the check did not report (looked for: names ${kind}…)"
		fail=1
	fi
done
exit "$fail"
