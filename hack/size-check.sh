#!/usr/bin/env bash
# The house's size limits (CONVENTIONS): no product Go file and no chart template over 500 lines,
# and the Go compiled into the four shipped programs within 28,000 lines. Prints the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
max_file=500 max_total=28000 fail=0
pkgs=$($GO list -deps ./deviceplugin ./scheduler ./scheduler/simulate ./inspector | grep '^github.com/gpushare/gpushare' | sort -u)
files=$($GO list -f '{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}} {{end}}{{range .CgoFiles}}{{$d}}/{{.}} {{end}}' $pkgs)
total=0
for f in $files; do
  n=$(wc -l < "$f")
  total=$((total + n))
  if [ "$n" -gt "$max_file" ]; then echo "size-check: ${f#$PWD/} has $n lines (at most $max_file)"; fail=1; fi
done
for f in charts/gpushare/templates/*; do
  n=$(wc -l < "$f")
  if [ "$n" -gt "$max_file" ]; then echo "size-check: $f has $n lines (at most $max_file)"; fail=1; fi
done
echo "size-check: the shipped programs' Go is $total lines in $(echo "$pkgs" | wc -l) packages (at most $max_total)"
if [ "$total" -gt "$max_total" ]; then echo "size-check: over $max_total lines: remove before adding"; fail=1; fi
exit $fail
