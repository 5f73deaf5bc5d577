#!/usr/bin/env bash
# bench/stages.sh: where a request's CPU goes, in presenced and in the floor
# (bench/floor), under the same load: CONNS real clients from cmd/loadgen in
# rooms of 50, each sending {"type":"ping"} every second, none silent. Once
# the ramp is over, perf(1) samples the server's stacks (user and kernel) for
# SECS seconds; each sample is put in the stage of the first frame, from the
# leaf, that a rule below names: wake, read and unframe, parse, keepalive,
# presence, answer encode, write, scheduling and GC, other. Prints a markdown
# table: each stage's share of the samples and its CPU per request (samples
# over the sampling rate, over the requests of the window: CONNS x SECS).
#
#   bench/stages.sh                     presenced, then the floor
#   CONNS=15000 ROUNDS=2 bench/stages.sh
#
# Environment [defaults]: CONNS [5000], SECS [20], RAMP [10], FREQ (samples
# a second) [997], ROUNDS (servers alternate) [1], SERVERS ["presenced floor"],
# PRESENCED_BIN (a binary instead of building ./cmd/presenced), OUT
# [a new temporary directory]. Needs perf and the right to profile the
# server. Sampling costs the server a little CPU: compare the stages, and
# take CPU per request itself from bench/scale.sh. Load stays on 127.0.0.1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
OUT=${OUT:-$(mktemp -d /tmp/presenced-stages.XXXXXX)}
mkdir -p "$OUT"
CONNS=${CONNS:-5000}
SECS=${SECS:-20}
RAMP=${RAMP:-10}
FREQ=${FREQ:-997}
ROUNDS=${ROUNDS:-1}
SERVERS=${SERVERS:-"presenced floor"}
PORT=${PORT:-18110}

log() { echo "stages: $*" >&2; }

build_presenced "$OUT/presenced"
(cd "$ROOT" && go build -o "$OUT/loadgen" ./cmd/loadgen)
(cd "$ROOT/bench/floor" && go build -o "$OUT/floor" .)

# The rules, leaf first: a kernel frame of the scheduler decides nothing, so
# a thread woken in epoll_wait counts as wake and one woken in a futex or
# sysmon's sleep as scheduling.
CLASSIFY='
function stage(s) {
	if (s ~ /^runtime\.(gcBgMarkWorker|gcDrain|gcAssistAlloc|bgsweep|bgscavenge|markroot|scanobject|greyobject|gcMarkDone|gcStart|sweepone|scanstack|gcMarkTermination|wbBufFlush)/) return "scheduling and GC"
	if (s ~ /^runtime\.(schedule|findRunnable|park_m|sysmon|mcall|gopark|goready|ready|futex|notesleep|notewakeup|notetsleep|wakep|startm|stopm|runqsteal|stealWork|checkTimers|mPark|handoffp|goexit0|newproc|casgstatus|usleep|osyield|netpoll)/) return "scheduling and GC"
	if (s ~ /^(futex_|do_nanosleep|hrtimer_nanosleep|exit_to_user_mode_loop|irqentry_exit_to_user_mode)/) return "scheduling and GC"
	if (s ~ /^(syscall\.write|ksys_write)$/ || s ~ /transport\.\(\*socket\)\.(write|writeOnce)$|transport\.\(\*conn\)\.flushWrites$|transport\.\(\*wire\)\.Write$|transport\.\(\*conn\)\.writeLoop$|gorilla\/websocket\.\(\*Conn\)\.(WriteMessage|NextWriter|flushFrame|beginMessage)/) return "write"
	if (s ~ /presenced\/protocol\.Encode|encoding\/json\.(Marshal|\(\*encodeState\))|transport\.\(\*conn\)\.reply$/) return "answer encode"
	if (s ~ /presenced\/protocol\.Parse|encoding\/json\.(Unmarshal|\(\*decodeState\)|checkValid|\(\*scanner\)|state)|^bytes\.Equal/) return "parse"
	if (s ~ /presenced\/tracker\.|transport\.\(\*conn\)\.touch$|^main\.\(\*server\)\.sweep$/) return "keepalive"
	if (s ~ /presenced\/presence\./) return "presence"
	if (s ~ /^(syscall\.read|ksys_read)$/ || s ~ /transport\.\(\*wire\)\.(fill|Read)$|transport\.\(\*socket\)\.read$|gorilla\/websocket\.|transport\.\(\*conn\)\.readMessage$|transport\.onlyPings$|^bufio\.|^main\.\(\*server\)\.frames$/) return "read and unframe"
	if (s ~ /^(syscall\.EpollWait|do_epoll_wait)$|transport\.\(\*poller\)|transport\.\(\*conn\)\.(wake|enqueue|admit|push)$|transport\.\(\*workers\)\.(do|work|nextLocked)$|^main\.\(\*server\)\.(Serve|readable)$/) return "wake"
	return ""
}
function flush() { total++; count[got == "" ? "other" : got]++; got = ""; n = 0 }
/^[^ \t]/ { if (n) flush(); n = 1; got = ""; next }
/^[ \t]+[0-9a-f]+ / { if (got == "") got = stage($2); next }
/^$/ { if (n) flush() }
END { if (n) flush(); for (k in count) print k "\t" count[k]; print "total\t" total }'

STAGES=("wake" "read and unframe" "parse" "keepalive" "presence" "answer encode" "write" "scheduling and GC" "other")
declare -A SHARE # "server,round,stage" -> "percent us_per_request"
declare -A CPU   # "server,round" -> loadgen's server CPU per request in the hold (µs), sampling included

profile() { # server round
	local name=$1 r=$2 pid lg
	case $name in
	presenced) "$OUT/presenced" -addr "127.0.0.1:$PORT" -slots 6 -tick 1s >"$OUT/$name-$r.log" 2>&1 & ;;
	floor) "$OUT/floor" -addr "127.0.0.1:$PORT" -timeout 5s -tick 1s >"$OUT/$name-$r.log" 2>&1 & ;;
	*)
		log "unknown server $name"
		exit 2
		;;
	esac
	pid=$!
	SERVER_PID=$pid
	for _ in $(seq 100); do
		curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	"$OUT/loadgen" -url "ws://127.0.0.1:$PORT/ws" -conns "$CONNS" -ramp "${RAMP}s" -duration "$((RAMP + SECS + 10))s" \
		-every 1s -silent 0 -users "$CONNS" -room 50 -source-first 127.0.0.50 -server-pid "$pid" \
		>"$OUT/$name-$r.json" 2>"$OUT/$name-$r.progress" &
	lg=$!
	sleep $((RAMP + 4))
	log "$name, round $r: sampling $SECS s at $CONNS connections"
	perf record -q -F "$FREQ" -g -p "$pid" -o "$OUT/$name-$r.perf" -- sleep "$SECS" 2>"$OUT/$name-$r.perf.log"
	wait "$lg" || log "$name: loadgen exit $? (see $OUT/$name-$r.progress)"
	stop_server
	local j cpu ka
	j=$(cat "$OUT/$name-$r.json")
	cpu=$(field server_cpu_hold_s "$j")
	ka=$(field hold_keepalives "$j")
	CPU["$name,$r"]=$(awk -v c="${cpu:-0}" -v k="${ka:-0}" 'BEGIN{ if (k>0) printf "%.1f", c*1e6/k; else print "-" }')
	local stage samples total
	total=$(perf script -i "$OUT/$name-$r.perf" -F comm,tid,ip,sym 2>/dev/null | awk "$CLASSIFY" | tee "$OUT/$name-$r.stages" | awk -F'\t' '$1=="total"{print $2}')
	while IFS=$'\t' read -r stage samples; do
		[[ $stage == total ]] && continue
		SHARE["$name,$r,$stage"]=$(awk -v s="$samples" -v t="$total" -v f="$FREQ" -v n="$((CONNS * SECS))" \
			'BEGIN{ printf "%.1f%% %.2f", 100*s/t, s/f*1e6/n }')
	done <"$OUT/$name-$r.stages"
	log "$name, round $r: $total samples; $(tr '\t\n' '=,' <"$OUT/$name-$r.stages")"
}

for r in $(seq "$ROUNDS"); do
	for s in $SERVERS; do
		profile "$s" "$r"
	done
done

echo
echo "$CONNS connections, one ping a second each, rooms of 50; $SECS s of perf at $FREQ Hz per round; $(nproc) cores."
echo "Cells: share of the server's samples, and µs of CPU per request (samples / rate / ($CONNS x $SECS requests))."
echo
header="| stage |"
rule="|---|"
for r in $(seq "$ROUNDS"); do
	for s in $SERVERS; do
		header+=" $s (round $r) |"
		rule+="---:|"
	done
done
echo "$header"
echo "$rule"
for st in "${STAGES[@]}" total; do
	row="| $st |"
	for r in $(seq "$ROUNDS"); do
		for s in $SERVERS; do
			if [[ $st == total ]]; then
				t=$(awk -F'\t' '$1=="total"{print $2}' "$OUT/$s-$r.stages")
				row+=" $(awk -v s="$t" -v f="$FREQ" -v n="$((CONNS * SECS))" 'BEGIN{ printf "%.2f", s/f*1e6/n }') µs (loadgen: ${CPU["$s,$r"]} µs) |"
			else
				read -r pct us <<<"${SHARE["$s,$r,$st"]:-0.0% 0.00}"
				row+=" $pct, $us µs |"
			fi
		done
	done
	echo "$row"
done
echo
echo "perf data, stage counts and logs: $OUT"
