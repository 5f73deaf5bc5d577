#!/usr/bin/env bash
# bench/fanout.sh: what presence costs the server when many users arrive at
# once. CONNS clients, one user each, connect within RAMP seconds and stay; the
# script counts the frames the server sends (presenced_frames_sent_total on
# /metrics, else the frames the clients received) and the server's CPU seconds
# from before the first dial to SETTLE seconds after the last, before any
# client leaves. Cases:
#
#   no channels      presenced, clients join nothing: the cost of connecting alone
#   rooms of ROOM    presenced, client i in room-<i/ROOM>
#   one channel      presenced, every client in one channel "all" (above
#                    -presence-lists members its diffs carry the count only)
#   v1               only with V1_BIN: a server that sends every online edge to
#                    every connection (no channels), measured the same way
#
# Environment (defaults in brackets):
#   CONNS [5000]  RAMP seconds [5]  SETTLE seconds after the ramp [10]  ROOM [50]
#   SLOTS TICK [31, 1s]  PORT [18180]
#   CASES ["none rooms one v1"]; v1 runs only when V1_BIN is set
#   V1_BIN         a presenced binary of the first protocol, e.g. built with
#                  git worktree add /tmp/v1 <commit> && (cd /tmp/v1 && go build -o /tmp/presenced-v1 ./cmd/presenced)
#   PRESENCED_BIN  use this presenced binary instead of building ./cmd/presenced
#   OUT            directory for binaries and logs [a new temporary directory]
#
# Load stays on 127.0.0.0/8 and ends after RAMP + SETTLE seconds. The CPU
# figures include accepting the connections; the "no channels" row shows that
# part on its own. Cores are shared with the load generator.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
OUT=${OUT:-$(mktemp -d /tmp/presenced-fanout.XXXXXX)}
mkdir -p "$OUT"
CONNS=${CONNS:-5000}
RAMP=${RAMP:-5}
SETTLE=${SETTLE:-10}
ROOM=${ROOM:-50}
SLOTS=${SLOTS:-31}
TICK=${TICK:-1s}
PORT=${PORT:-18180}
CASES=${CASES:-"none rooms one v1"}
V1_BIN=${V1_BIN:-}

log() { echo "fanout: $*" >&2; }

log "building into $OUT"
build_presenced "$OUT/presenced"
(cd "$ROOT" && go build -o "$OUT/loadgen" ./cmd/loadgen)

HTTP="http://127.0.0.1:$PORT"

start_server() { # BINARY LOGNAME
	"$1" -addr "127.0.0.1:$PORT" -slots "$SLOTS" -tick "$TICK" >"$OUT/$2.log" 2>&1 &
	SERVER_PID=$!
	for _ in $(seq 100); do
		if curl -fsS "$HTTP/healthz" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	log "server did not come up; see $OUT/$2.log"
	exit 1
}

# cpu_s PID: user + system CPU seconds of a process (USER_HZ 100).
cpu_s() { awk '{ i = index($0, ") "); split(substr($0, i + 2), f, " "); printf "%.2f\n", (f[12] + f[13]) / 100 }' "/proc/$1/stat"; }

# by_type METRICS_FILE: "type count" per line of presenced_frames_sent_total.
by_type() {
	sed -nE 's/^presenced_frames_sent_total\{.*type="([^"]+)".*\} ([0-9.e+]+)$/\1 \2/p' "$1" |
		awk '{ s[$1] += $2 } END { for (k in s) printf "%s %.0f\n", k, s[k] }' | sort
}

# slow METRICS_FILE: slow-consumer closes counted by the server.
slow() { awk '$1 ~ /^presenced_closes_total\{.*reason="slow"/ { s += $2; seen = 1 } END { if (seen) printf "%.0f", s }' "$1"; }


ROWS=()
run_case() { # NAME BINARY LOADGEN_ARGS...
	local name=$1 bin=$2
	shift 2
	local tag=${name// /-}
	start_server "$bin" "$tag"
	sleep 1
	curl -fsS "$HTTP/metrics" >"$OUT/$tag.metrics0" 2>/dev/null || : >"$OUT/$tag.metrics0"
	local cpu0 t0
	cpu0=$(cpu_s "$SERVER_PID")
	t0=$EPOCHREALTIME
	log "$name: $CONNS clients within ${RAMP}s, then ${SETTLE}s"
	"$OUT/loadgen" -url "ws://127.0.0.1:$PORT/ws" -conns "$CONNS" -ramp "${RAMP}s" \
		-duration "$((RAMP + SETTLE))s" -every 0 -silent 0 "$@" >"$OUT/$tag.json" 2>"$OUT/$tag.progress" &
	local lg=$!
	# Sample just before loadgen's deadline (it starts its clock 0.3 s after
	# launch), while every client is still connected.
	sleep "$(awk -v t0="$t0" -v now="$EPOCHREALTIME" -v d="$((RAMP + SETTLE))" 'BEGIN { s = t0 + d - 0.7 - now; printf "%.3f", (s > 0 ? s : 0) }')"
	local cpu1
	cpu1=$(cpu_s "$SERVER_PID")
	curl -fsS --max-time 5 "$HTTP/metrics" >"$OUT/$tag.metrics1" 2>/dev/null || : >"$OUT/$tag.metrics1"
	local rc=0
	wait "$lg" || rc=$?
	stop_server
	local j
	j=$(cat "$OUT/$tag.json")
	if [[ -z $j ]]; then
		ROWS+=("| $name | - | - | - | - | - | - | - | loadgen printed nothing (exit $rc) |")
		return
	fi
	local connected recv fc codes types sent per sl cpu
	connected=$(field connected "$j")
	recv=$(field frames_received "$j")
	fc=$(field false_closed "$j")
	codes=$(sed -nE 's/.*"close_codes":\{([^}]*)\}.*/\1/p' <<<"$j" | tr -d '"')
	cpu=$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.2f", b - a }')
	if grep -q '^presenced_frames_sent_total' "$OUT/$tag.metrics1"; then
		local t
		t=$(join -a 2 -e 0 -o 2.1,1.2,2.2 <(by_type "$OUT/$tag.metrics0") <(by_type "$OUT/$tag.metrics1") |
			awk '{ d = $3 - $2; if (d > 0) { printf "%s%s %d", sep, $1, d; sep = ", "; n += d } } END { printf "\t%d", n }')
		types=${t%%$'\t'*}
		sent=${t##*$'\t'}
		per=$(awk -v s="$sent" -v n="$connected" 'BEGIN { if (n > 0) printf "%.1f", s / n; else print "-" }')
		sent="$sent (server)"
	else
		types=$(sed -nE 's/.*"frames_by_type":\{([^}]*)\}.*/\1/p' <<<"$j" | tr -d '"' | sed 's/:/ /g; s/,/, /g')
		per=$(awk -v s="$recv" -v n="$connected" 'BEGIN { if (n > 0) printf "%.1f", s / n; else print "-" }')
		sent="$recv (received by clients)"
	fi
	sl=$(slow "$OUT/$tag.metrics1")
	if [[ -z $sl ]]; then
		sl=$(sed -nE 's/.*"close_codes":\{[^}]*"1008":([0-9]+).*/\1/p' <<<"$j")
		sl="${sl:-0} (clients)"
	fi
	local verdict=ok
	[[ $rc -ne 0 ]] && verdict="loadgen exit $rc"
	ROWS+=("| $name | $connected | $sent | $per | $types | $cpu | $sl | $fc | ${codes:-none} | $verdict |")
	log "$name: $(tail -c 600 "$OUT/$tag.json")"
}

for c in $CASES; do
	case $c in
	none) run_case "no channels" "$OUT/presenced" ;;
	rooms) run_case "rooms of $ROOM" "$OUT/presenced" -room "$ROOM" ;;
	one) run_case "one channel of $CONNS" "$OUT/presenced" -big-channel all ;;
	v1)
		if [[ -n $V1_BIN ]]; then
			run_case "v1, every edge to everyone" "$V1_BIN"
		else
			log "v1: skipped, V1_BIN is not set"
		fi
		;;
	*)
		log "unknown case $c"
		exit 2
		;;
	esac
done

echo
echo "$CONNS users (one connection each) joining within ${RAMP}s, measured until ${SETTLE}s after the ramp;"
echo "$(nproc) cores shared by server and load generator; ring ${SLOTS} x ${TICK}."
echo
echo "| case | connected | frames sent | frames per join | by type | server CPU s | slow closes | false closes | closes before the end | loadgen |"
echo "|---|---:|---:|---:|---|---:|---:|---:|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
echo "Logs, metrics and loadgen JSON: $OUT"
