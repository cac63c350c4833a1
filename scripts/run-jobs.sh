#!/usr/bin/env bash
# run-jobs.sh: make test's side-by-side runs. Each argument is one job,
# "name=shell command", run with bash -c from the current directory; all
# jobs start at once. A job's output goes to a log of its own, printed as
# one block, headed by the job's name, when the job ends, so that outputs
# never interleave. Then a summary: every job's result and duration, and for
# each failed job the names of its failed tests (the `--- FAIL` lines; the
# full output is in its block above).
#
# Exit status: 0 when every job exited 0, else 1. ^C or SIGTERM is passed on
# to every job (each in a process group of its own), so that test binaries
# stop their PostgreSQL servers.
set -uo pipefail
set -m # each job in a process group of its own (signals reach all of a job)

if [ $# -eq 0 ]; then
	echo "usage: run-jobs.sh name=command ..." >&2
	exit 2
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/syncguard-jobs.XXXXXX") || exit 2
names=()
pids=()
starts=()
declare -A result=()

stop() {
	for p in "${pids[@]}"; do
		kill -INT -- "-$p" 2>/dev/null
	done
	wait
	rm -rf "$logs"
	exit 130
}
trap stop INT TERM

for i in $(seq 0 $(($# - 1))); do
	arg=${*:$((i + 1)):1}
	name=${arg%%=*}
	cmd=${arg#*=}
	names+=("$name")
	starts+=("$(date +%s)")
	bash -c "$cmd" >"$logs/$i.log" 2>&1 </dev/null &
	pids+=("$!")
	echo "== $name: started (pid $!)"
done

left=${#pids[@]}
while [ "$left" -gt 0 ]; do
	# wait -n -p says which job ended (bash 5.1).
	wait -n -p ended
	rc=$?
	[ -n "${ended:-}" ] || continue
	for i in "${!pids[@]}"; do
		[ "${pids[$i]}" = "$ended" ] || continue
		[ -z "${result[$i]:-}" ] || continue
		secs=$(($(date +%s) - ${starts[$i]}))
		if [ "$rc" -eq 0 ]; then
			result[$i]="passed in $secs s"
		else
			result[$i]="FAILED (exit $rc) after $secs s"
		fi
		echo "== ${names[$i]}: ${result[$i]}; its output:"
		cat "$logs/$i.log"
		echo "== ${names[$i]}: end of output"
		left=$((left - 1))
	done
	ended=
done

failed=0
echo "== side by side: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null | sed 's/^/load average /')"
for i in "${!names[@]}"; do
	echo "   ${names[$i]}: ${result[$i]}"
	case ${result[$i]} in
	FAILED*)
		failed=1
		grep -E '^[[:space:]]*--- FAIL|^FAIL|^panic:' "$logs/$i.log" | sed 's/^/      /' | head -40
		;;
	esac
done
rm -rf "$logs"
exit "$failed"
