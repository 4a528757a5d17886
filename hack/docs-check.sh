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
#   default  `--foo` (`x`) or `--foo` (default x)            -> the flag's "(default x)" in --help
#   policy   `gpushare-foo` (the chart's admission policies) -> a ValidatingAdmissionPolicy of the chart;
#            "N admission policies" -> N the chart's count; operations.md's table lists every one
#   version  `hack/k8s-version`, vX.Y.Z                      -> that file; "Kubernetes 1.A, 1.B or 1.C"
#            -> Chart.yaml's kubeVersion range
#   link     [text](path#anchor) to a repository file        -> the file exists, the anchor is a heading
#   reference docs/reference/*.md are what `go run ./hack/reference` writes (the configuration
#            kinds from their Go types, the values from values.yaml's "# --" comments)
#   command  a code block that holds a command is labelled sh or console (make docs-run runs it) or
#            text; every <!-- docs-run: ... --> directive applies to a command (hack/docsrun -check)
#   budget   docs/*.md at most DOCS_LINES lines in all (3000; generated references live under
#            docs/reference/ and do not count), CHANGELOG.md at most CHANGELOG_LINES (250)
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
--create-namespace --reuse-values --reset-then-reuse-values --wait --install --version
--endpoint-reconciler-type --authorization-config --authorization-mode
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
	"$tmp/bin/$b" --help >"$tmp/help-$b" 2>&1 || true
	grep -oE -- '--[a-z][a-z0-9_-]*' "$tmp/help-$b" || true
done | sort -u >"$tmp/flags"
# "flag default" for every flag whose --help line ends in (default X); quotes dropped.
cat "$tmp"/help-* | awk '
	match($0, /^ *(-[a-z], )?--[a-z0-9-]+/) {
		f = substr($0, RSTART, RLENGTH); sub(/^ *(-[a-z], )?--/, "", f)
		if (match($0, /\(default [^)]*\)$/)) {
			d = substr($0, RSTART + 9, RLENGTH - 10); gsub(/"/, "", d); print f, d
		}
	}' | sort -u >"$tmp/defaults"

# The chart's admission policies (names without the release prefix), and how many render by default:
# every ValidatingAdmissionPolicy of the templates but the DRA ones (dra.enabled is off by default).
chart=charts/gpushare
grep -h -A3 '^kind: ValidatingAdmissionPolicy$' $chart/templates/*.yaml |
	sed -n 's/^  name: {{ \$fullname }}-\([a-z0-9-]*\)$/\1/p' | sort -u >"$tmp/policies"
npolicies=$(for f in $chart/templates/*.yaml; do case $f in */dra*) continue ;; esac; grep -c '^kind: ValidatingAdmissionPolicy$' "$f" || true; done | awk '{n += $1} END {print n}')
sed -n 's/.*name: {{ \$fullname }}-\([a-z0-9-]*\).*/\1/p' $chart/templates/*.yaml | sort -u >"$tmp/objects"
printf '%s\n' system scheduler device-plugin >>"$tmp/objects"
k8sversion=$(cat hack/k8s-version)
# kubeVersion: ">=1.A.0-0 <1.B.0-0" -> oldest 1.A, newest 1.(B-1)
read -r kmin kmax < <(sed -n 's/^kubeVersion: ">=1\.\([0-9]*\)\.0-0 <1\.\([0-9]*\)\.0-0"$/\1 \2/p' $chart/Chart.yaml | awk '{print $1, $2 - 1}')
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
	check_facts "$@"
}

# words: one..twenty as numbers, for counts written out.
number() { awk -v w="$1" 'BEGIN { n = split("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen", a, " "); for (i = 1; i <= n; i++) if (a[i] == tolower(w)) { print i; exit } print w }'; }

# check_facts FILE...: defaults, policies, versions and links the files state.
check_facts() {
	# `--flag` (`value`) / `--flag` (default value): one value, then ")" "," or ";".
	{ grep -noE '`--[a-z0-9-]+` \((default )?`?\**[^`),;/* ]+( (s|ms|min|m|h))?\**`?[),;]' "$@" /dev/null || true; } |
		sed -E 's/^([^:]*):([0-9]+):`--([a-z0-9-]+)` \((default )?`?\**([^`),;/* ]+( (s|ms|min|m|h))?)\**`?.$/\1:\2:\3:\5/' |
		awk -F: 'NR == FNR { sub(/ /, ":"); split($0, d, ":"); def[d[1]] = d[2]; next }
			function norm(v) { gsub(/[ *]/, "", v); sub(/min$/, "m", v); sub(/m0s$/, "m", v); sub(/h0m$/, "h", v); return v }
			($3 in def) && norm($4) != norm(def[$3]) {
				print $1 ":" $2 " says --" $3 " defaults to " $4 ", but its --help says " def[$3]
			}' "$tmp/defaults" -
	# On a line about policies, `gpushare-foo` must be an object of the chart (a policy, its ConfigMap, …);
	# operations.md's table of policies lists exactly the chart's.
	{ grep -niE 'polic' "$@" /dev/null || true; } | { grep -oE '^[^:]*:[0-9]+:|`gpushare-[a-z0-9-]+`' || true; } |
		awk '/^`/ { gsub(/`|gpushare-/, ""); print where $0; next } { where = $0 }' |
		awk -F: 'NR == FNR { o[$0] = 1; next } !($3 in o) {
			print $1 ":" $2 " names the admission policy (or chart object) gpushare-" $3 ", which the chart does not define"
		}' "$tmp/objects" -
	for f in "$@"; do
		case $f in */operations.md) ;; *) continue ;; esac
		awk '/^## / { in_section = /[Aa]dmission polic/ } in_section' "$f" |
			sed -n 's/^| `gpushare-\([a-z0-9-]*\)` |.*/\1/p' | sort -u >"$tmp/listed"
		comm -3 "$tmp/policies" "$tmp/listed" | sed "s|^\t*|$f: the table of admission policies and the chart differ on gpushare-|"
	done
	{ grep -noiE '\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|[0-9]+) (admission policies|ValidatingAdmissionPolicies)' "$@" /dev/null || true; } |
		while IFS=: read -r f l text; do
			n=$(number "${text%% *}")
			[ "$n" = "$npolicies" ] || echo "$f:$l says ${text%% *} admission policies; the chart renders $npolicies by default"
		done
	# versions
	{ grep -noE '`hack/k8s-version`[^v`]{0,6}v1\.[0-9]+\.[0-9]+' "$@" /dev/null || true; } |
		while IFS=: read -r f l text; do
			v=v${text##*v}
			[ "$v" = "$k8sversion" ] || echo "$f:$l says hack/k8s-version is $v; it is $k8sversion"
		done
	{ grep -noE 'Kubernetes 1\.[0-9]+, 1\.[0-9]+,? (or|and) 1\.[0-9]+' "$@" /dev/null || true; } |
		while IFS=: read -r f l text; do
			lo=$(echo "$text" | sed -E 's/Kubernetes 1\.([0-9]+),.*/\1/'); hi=${text##*1.}
			[ "$lo" = "$kmin" ] && [ "$hi" = "$kmax" ] ||
				echo "$f:$l says $text; the chart's kubeVersion allows 1.$kmin to 1.$kmax"
		done
	# links to repository files and their headings
	for f in "$@"; do
		{ grep -noE '\]\([^) #:]*(#[a-z0-9_-]+)?\)' "$f" || true; } | while IFS=: read -r l link; do
			target=${link#](}; target=${target%)}
			anchor=; case $target in *'#'*) anchor=${target#*#}; target=${target%%#*} ;; esac
			[ -n "$target" ] && file=$(dirname "$f")/$target || file=$f
			if [ ! -e "$file" ]; then echo "$f:$l links to $target, which does not exist"; continue; fi
			[ -n "$anchor" ] && [ -f "$file" ] || continue
			slugs "$file" | grep -qxF -- "$anchor" || echo "$f:$l links to $target#$anchor, a heading $file does not have"
		done
	done
}

# slugs FILE: GitHub's anchor of every heading: lower case, punctuation dropped, spaces to hyphens.
slugs() {
	awk '/^```/ { fence = !fence } !fence && /^#+ / { sub(/^#+ /, ""); print }' "$1" |
		tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9 _-]//g; s/ /-/g'
}

# budget LIMIT WHAT FILE...: one line when the files hold more than LIMIT lines in all.
budget() {
	local limit=$1 what=$2; shift 2
	local n; n=$(cat "$@" | wc -l)
	[ "$n" -le "$limit" ] || echo "$what: $n lines, more than $limit: cut prose before adding (largest: $(wc -l "$@" | sort -rn | sed -n '2,4p' | awk '{printf "%s%s %s", sep, $2, $1; sep = ", "}'))"
}

fail=0
check "${docs[@]}" >"$tmp/found"
# The generated references (docs/reference/) are current: the configuration kinds from their Go
# types, the chart's values from values.yaml's comments (and within its key budget).
go run ./hack/reference -check >>"$tmp/found" 2>&1 || true
# Every code block that holds a command is labelled (sh/console: make docs-run runs it; text: not
# one to type), and every docs-run directive applies to a command.
go run ./hack/docsrun -check "${docs[@]}" 2>&1 | grep -v -e '^docs-run: [0-9]* files: ' -e '^exit status ' | sed 's/^docs-run: //' >>"$tmp/found" || true
if [ -z "${DOCS:-}" ]; then
	budget "${DOCS_LINES:-3000}" "docs/*.md" docs/*.md >>"$tmp/found"
	budget "${CHANGELOG_LINES:-250}" CHANGELOG.md CHANGELOG.md /dev/null >>"$tmp/found"
fi
if [ -s "$tmp/found" ]; then
	sed 's/^/docs-check: /' "$tmp/found"
	fail=1
else
	echo "docs-check: ${#docs[@]} files: every make target, flag, metric and key they name exists; the defaults, policies, versions and links they state are right; within the line budget"
fi

# The check must see what is broken in $broken: one name of each kind, and a file over its budget.
check "$broken" >"$tmp/self"
budget 5 "$broken" "$broken" /dev/null >>"$tmp/self"
go run ./hack/docsrun -check "$broken" >>"$tmp/self" 2>&1 || true
for kind in 'without a language holds a command' 'applies to no command' '`make ' 'the flag ' 'the metric ' 'the key ' 'defaults to ' 'the admission policy ' 'admission policies; ' 'hack/k8s-version is ' "kubeVersion allows " 'which does not exist' 'a heading ' 'more than 5'; do
	if ! grep -qF "$kind" "$tmp/self"; then
		echo "docs-check: self-test: $broken states something wrong that the check did not report (looked for: ${kind}…)"
		fail=1
	fi
done
exit "$fail"
