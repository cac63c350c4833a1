#!/usr/bin/env bash
# make test-fresh: what a newcomer sees. Clones the committed HEAD of this
# repository into a temporary directory, runs the README's two commands
# there (`make demo`, then `make test`, through the Makefile's own targets),
# reports each one's result and duration, and removes the clone.
#
#   TEST_FRESH_STEPS="demo test"   the make targets to run, in order (default:
#                                  the two the README's first block names)
#   TEST_FRESH_DRY=1               clone, check, print what would run, stop
#
# The tests run with CI=true unless CI is set: a missing database or tool
# fails instead of skipping. Uncommitted changes are not in the clone (it
# says so). Each step's output goes to the terminal and to a log outside the
# clone, kept when a step fails. Exit status: 0 when every step passed.
set -uo pipefail

root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel) || exit 2
head=$(git -C "$root" rev-parse HEAD) || exit 2
short=${head:0:12}

# The README's commands: the first fenced block names `make demo` and
# `make test`; a README that stops naming one of them makes this fail, so
# the script and the README cannot drift apart unnoticed.
readme_block=$(awk '/^```/{n++; next} n==1' "$root/README.md")
for t in demo test; do
	if ! grep -qE "^make $t( |$)" <<<"$readme_block"; then
		echo "test-fresh: README.md's first command block no longer names \`make $t\`; update scripts/test-fresh.sh with it" >&2
		exit 2
	fi
done
steps=${TEST_FRESH_STEPS:-demo test}

if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
	echo "test-fresh: uncommitted changes in $root are not tested: the clone is HEAD $short"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/syncguard-fresh.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
log="${TMPDIR:-/tmp}/syncguard-test-fresh-$short.log"
: >"$log"

echo "== test-fresh: cloning $root at $short into $tmp/repo"
git clone --quiet --no-checkout "$root" "$tmp/repo" &&
	git -C "$tmp/repo" checkout --quiet --detach "$head" || {
	echo "test-fresh: the clone failed" >&2
	exit 2
}
if [ "$(git -C "$tmp/repo" rev-parse HEAD)" != "$head" ]; then
	echo "test-fresh: the clone is not at $head" >&2
	exit 2
fi

export CI="${CI:-true}"
results=()
failed=0
total_start=$(date +%s)
for t in $steps; do
	if [ -n "${TEST_FRESH_DRY:-}" ]; then
		echo "== test-fresh: would run: (cd $tmp/repo && CI=$CI make $t)"
		results+=("make $t: not run (dry)")
		continue
	fi
	echo "== test-fresh: make $t (CI=$CI)" | tee -a "$log"
	start=$(date +%s)
	# A make of its own: nothing of a calling make's flags or level.
	(cd "$tmp/repo" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make "$t") 2>&1 | tee -a "$log"
	rc=${PIPESTATUS[0]}
	secs=$(($(date +%s) - start))
	if [ "$rc" -eq 0 ]; then
		results+=("make $t: passed in $secs s")
	else
		results+=("make $t: FAILED (exit $rc) after $secs s")
		failed=1
	fi
done

echo "== test-fresh: HEAD $short in a fresh clone, $(($(date +%s) - total_start)) s in all (load average now: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown))"
for r in "${results[@]}"; do
	echo "   $r"
done
if [ "$failed" -ne 0 ]; then
	echo "   the output is in $log"
	exit 1
fi
rm -f "$log"
