#!/usr/bin/env bash
# bench/scale.sh: presenced against the hand-written gorilla baseline
# (bench/baseline) and, with SERVERS naming it, the epoll floor (bench/floor),
# all driven by cmd/loadgen with the same settings, at 1k,
# 5k and ~90% of the open-file limit connections, one user per connection in
# rooms of 50, plus one presenced run with a single channel of 1,000 members.
# Prints a markdown table.
#
#   bench/scale.sh          quick run: a few minutes per server and count
#   bench/scale.sh full     5-minute hold at the largest count
#   bench/scale.sh soak     10 minutes of presenced under steady load and churn;
#                           heap and goroutines from /metrics at start and end
#
# Everything is tunable from the environment (defaults in brackets):
#   COUNTS     connection counts ["1000 5000 MAX"], MAX = 90% of `ulimit -Hn`
#   RAMP       seconds to open the clients [20; full: 60]
#   HOLD       seconds after the ramp [45; full: 45 below MAX]; 64 or more samples
#              RSS after 60 s of hold as well as right after the ramp
#   HOLD_MAX   hold at the largest count [HOLD; full: 300]
#   EVERY      app-ping interval of each client, Go duration ["10s"]; "0" only answers server pings
#   SILENT_PCT percentage of clients that go silent when the ramp ends [10]
#   USERS_PER  connections per user ID [1]
#   ROOM       clients per channel: client i joins room-<i/ROOM> at connect [50];
#              0: no channels
#   BIG        members of the extra run's single channel, a presenced run at
#              BIG connections, all in one channel [1000]; 0: no extra run
#   SLOTS TICK presenced ring [31, 1s]; the baseline gets the same timeout
#   TRANSPORT  ws or sse [ws]: sse drives Server-Sent Events clients (GET /sse, each
#              ping a POST /sse/{session} over the client's own keep-alive connection);
#              presenced only, MAX is halved (two sockets a client), no server pings,
#              so EVERY must be shorter than the timeout
#   SERVERS    ["presenced baseline"]; "floor" adds bench/floor, and with presenced
#              a table of presenced's CPU per 1k keepalives and RSS per connection
#              over the floor's, per round and count
#   ROUNDS     times every server runs at every count, interleaved [1]
#   SERVER_ENV environment for the servers only, e.g. "GOGC=50" or "GOMEMLIMIT=48MiB" [""]
#   SOAK_SECS SOAK_CONNS SOAK_CHURN  soak length, steady clients, clients per churn round [600, 5000, 1000]
#   OUT        directory for binaries and logs [a new temporary directory]
#   PRESENCED_BIN  use this presenced binary instead of building ./cmd/presenced
#
# Load stays on 127.0.0.0/8. The machine's cores are shared by the servers,
# the load generator and whatever else runs: read CPU figures with that in mind.
set -euo pipefail

MODE=${1:-quick}
case $MODE in quick | full | soak) ;; *)
	echo "usage: $0 [quick|full|soak]" >&2
	exit 2
	;;
esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
OUT=${OUT:-$(mktemp -d /tmp/presenced-scale.XXXXXX)}
mkdir -p "$OUT"

TRANSPORT=${TRANSPORT:-ws}
LIMIT=$(ulimit -Hn)
MAX=$((LIMIT * 9 / 10 / 100 * 100))
case $TRANSPORT in
ws) ;;
sse) MAX=$((MAX / 2 / 100 * 100)) ;;
*)
	echo "TRANSPORT must be ws or sse, got $TRANSPORT" >&2
	exit 2
	;;
esac
COUNTS=${COUNTS:-"1000 5000 MAX"}
COUNTS=${COUNTS//MAX/$MAX}
if [[ $MODE == full ]]; then
	RAMP=${RAMP:-60}
	HOLD=${HOLD:-45}
	HOLD_MAX=${HOLD_MAX:-300}
else
	RAMP=${RAMP:-20}
	HOLD=${HOLD:-45}
	HOLD_MAX=${HOLD_MAX:-$HOLD}
fi
EVERY=${EVERY:-10s}
SILENT_PCT=${SILENT_PCT:-10}
USERS_PER=${USERS_PER:-1}
ROOM=${ROOM:-50}
BIG=${BIG:-1000}
SLOTS=${SLOTS:-31}
TICK=${TICK:-1s}
SERVERS=${SERVERS:-"presenced baseline"}
P_PORT=${P_PORT:-18080}
B_PORT=${B_PORT:-18090}
F_PORT=${F_PORT:-18100}
ROUNDS=${ROUNDS:-1}
if [[ $TRANSPORT == sse && " $SERVERS " != " presenced " ]]; then
	echo "TRANSPORT=sse: only presenced serves Server-Sent Events; set SERVERS=presenced" >&2
	exit 2
fi

tick_ms=$(awk -v t="$TICK" 'BEGIN{ if (t ~ /ms$/) {sub(/ms$/,"",t); print t} else {sub(/s$/,"",t); print t*1000} }')
TIMEOUT_MS=$(((SLOTS - 1) * tick_ms))

log() { echo "scale: $*" >&2; }

build() {
	log "building into $OUT"
	build_presenced "$OUT/presenced"
	(cd "$ROOT" && go build -o "$OUT/loadgen" ./cmd/loadgen)
	(cd "$ROOT/bench/baseline" && go build -o "$OUT/baseline" .)
	(cd "$ROOT/bench/floor" && go build -o "$OUT/floor" .)
}

# field NAME JSON: a number field of loadgen's one-line JSON.

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# rss_median PID: the median of four RSS samples (kB) a second apart.
rss_median() {
	local i
	for i in 1 2 3 4; do
		rss_kb "$1"
		if ((i < 4)); then sleep 1; fi
	done | sort -n | awk '{v[NR] = $1} END {printf "%.0f\n", (v[2] + v[3]) / 2}'
}

start_server() { # name -> sets SERVER_PID and URL
	local name=$1 port
	case $name in
	presenced)
		port=$P_PORT
		# shellcheck disable=SC2086 # SERVER_ENV is words: NAME=value ...
		env ${SERVER_ENV:-} "$OUT/presenced" -addr "127.0.0.1:$port" -slots "$SLOTS" -tick "$TICK" >"$OUT/$name.log" 2>&1 &
		;;
	baseline)
		port=$B_PORT
		# shellcheck disable=SC2086
		env ${SERVER_ENV:-} "$OUT/baseline" -addr "127.0.0.1:$port" -timeout "${TIMEOUT_MS}ms" >"$OUT/$name.log" 2>&1 &
		;;
	floor)
		port=$F_PORT
		# shellcheck disable=SC2086
		env ${SERVER_ENV:-} "$OUT/floor" -addr "127.0.0.1:$port" -timeout "${TIMEOUT_MS}ms" -tick "$TICK" >"$OUT/$name.log" 2>&1 &
		;;
	*)
		log "unknown server $name"
		exit 2
		;;
	esac
	SERVER_PID=$!
	URL="ws://127.0.0.1:$port/ws"
	HTTP="http://127.0.0.1:$port"
	[[ $TRANSPORT == sse ]] && URL="$HTTP/sse"
	for _ in $(seq 100); do
		if curl -fsS "$HTTP/healthz" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	log "$name did not come up; see $OUT/$name.log"
	exit 1
}


ROWS=()
declare -A RESULT # "server,conns,room" -> "rss_per_conn_ramp rss_per_conn_held p99 silent_closed silent false_closes slow_closes"
declare -A COST   # "server,conns,round" -> "cpu_s_per_1k_keepalives rss_bytes_per_conn_ramp rss_bytes_per_conn_held"

# metric NAME [FILTER]: sum of the samples of one metric family in $HTTP/metrics
# whose labels match the regular expression FILTER; empty when the server has
# no /metrics or no such family.
metric() {
	local m
	m=$(curl -fsS "$HTTP/metrics" 2>/dev/null) || return 0
	awk -v name="$1" -v filter="${2:-}" '
		index($1, name) == 1 && (substr($1, length(name) + 1, 1) == "{" || length($1) == length(name)) {
			if (filter == "" || $1 ~ filter) { s += $2; seen = 1 }
		}
		END { if (seen) printf "%.0f\n", s }' <<<"$m"
}

# run_one SERVER CONNS HOLD_SECS SOURCE_FIRST ROOM [LABEL [ROUND]]
run_one() {
	local name=$1 conns=$2 hold=$3 src=$4 room=$5 label=${6:-$1} round=${7:-1}
	local silent=$((conns * SILENT_PCT / 100))
	local users=$(((conns + USERS_PER - 1) / USERS_PER))
	start_server "$name"
	sleep 1
	local rss0
	rss0=$(rss_kb "$SERVER_PID")
	log "$label: $conns conns ($silent silent, $users users, room $room), ramp ${RAMP}s, hold ${hold}s, idle RSS ${rss0} kB"
	local tag="$name-$conns-room$room-r$round"
	local frames0
	frames0=$(metric presenced_frames_sent_total)
	"$OUT/loadgen" -transport "$TRANSPORT" -url "$URL" -conns "$conns" -ramp "${RAMP}s" -duration "$((RAMP + hold))s" \
		-every "$EVERY" -silent "$silent" -users "$users" -room "$room" -source-first "$src" \
		-server-pid "$SERVER_PID" >"$OUT/$tag.json" 2>"$OUT/$tag.progress" &
	local lg=$!
	# RSS per connection is sampled twice, each time the median of four
	# samples a second apart: right after the ramp, with every client
	# connected and none closed yet (the silent ones go a timeout later), and
	# after 60 s of hold, when the ramp's garbage has been collected, if the
	# hold is that long (else loadgen's sample at the end of the hold).
	local t0=$SECONDS rss1 rss_held=
	sleep $((RAMP + 1))
	rss1=$(rss_median "$SERVER_PID")
	if ((hold >= 64)); then
		local wait_s=$((RAMP + 60 - (SECONDS - t0)))
		if ((wait_s > 0)); then sleep "$wait_s"; fi
		rss_held=$(rss_median "$SERVER_PID")
	fi
	local rc=0
	wait "$lg" || rc=$?
	local j
	j=$(cat "$OUT/$tag.json")
	# Slow-consumer closes and frames sent from the server's own counters
	# (presenced only; the baseline has no /metrics). The clients are closed
	# by now, so frames sent include the last leaves.
	local slow frames1
	slow=$(metric presenced_closes_total 'reason="slow"')
	frames1=$(metric presenced_frames_sent_total)
	curl -fsS "$HTTP/metrics" >"$OUT/$tag.metrics" 2>/dev/null || true
	stop_server
	if [[ -z $j ]]; then
		log "$tag: loadgen printed nothing (exit $rc); see $OUT/$tag.progress"
		ROWS+=("| $label | $conns | - | - | - | - | - | - | - | - | - | - | loadgen failed |")
		return
	fi
	local connected cpu ka p50 p99 max sc si fc
	connected=$(field connected "$j")
	cpu=$(field server_cpu_hold_s "$j")
	ka=$(field hold_keepalives "$j")
	p50=$(field detect_p50_ms "$j")
	p99=$(field detect_p99_ms "$j")
	max=$(field detect_max_ms "$j")
	sc=$(field silent_closed "$j")
	si=$(field silent "$j")
	fc=$(field false_closed "$j")
	# RSS after 60 s of hold (or at its end), over the clients still
	# connected then.
	local rss_end left per_conn per_conn_end cpu_per_k
	rss_end=${rss_held:-$(sed -nE 's/.*"server_rss_kb_hold":\[[0-9]+,([0-9]+)\].*/\1/p' <<<"$j")}
	left=$((connected - sc - fc))
	per_conn=$(awk -v a="$rss1" -v b="$rss0" -v n="$connected" 'BEGIN{ if (n>0) printf "%.1f", (a-b)/n; else print "-" }')
	per_conn_end=$(awk -v a="${rss_end:-0}" -v b="$rss0" -v n="$left" 'BEGIN{ if (n>0 && a>0) printf "%.1f", (a-b)/n; else print "-" }')
	cpu_per_k=$(awk -v c="${cpu:-0}" -v k="${ka:-0}" 'BEGIN{ if (k>0) printf "%.4f", c/(k/1000); else print "-" }')
	# Slow closes as the clients saw them (close code 1008) where the server
	# does not count them itself.
	local slow_seen
	slow_seen=$(sed -nE 's/.*"close_codes":\{[^}]*"1008":([0-9]+).*/\1/p' <<<"$j")
	[[ -z $slow ]] && slow="${slow_seen:-0} (clients)"
	local recv fpc sent
	recv=$(field frames_received "$j")
	fpc=$(sed -nE 's/.*"frames_per_client":\{[^}]*"mean":([0-9.]+).*/\1/p' <<<"$j")
	sent=-
	[[ -n $frames0 && -n $frames1 ]] && sent=$((frames1 - frames0))
	local verdict=ok
	[[ $rc -ne 0 ]] && verdict="exit $rc"
	ROWS+=("| $label | $conns | $connected | $per_conn | $per_conn_end | $cpu_per_k | ${cpu:-?} s / ${ka:-?} | $p50 / $p99 / $max | $sc / $si | $fc | $slow | $sent / $recv (${fpc:-?}) | $verdict |")
	RESULT["$name,$conns,$room"]="$per_conn $per_conn_end $p99 $sc $si $fc ${slow%% *}"
	COST["$name,$conns,$round"]="$cpu_per_k $(awk -v a="$rss1" -v b="$rss0" -v n="$connected" 'BEGIN{ if (n>0) printf "%.0f", (a-b)*1024/n; else print "-" }')"
	COST["$name,$conns,$round"]+=" $(awk -v a="${rss_end:-0}" -v b="$rss0" -v n="$left" 'BEGIN{ if (n>0 && a>0) printf "%.0f", (a-b)*1024/n; else print "-" }')"
	log "$tag: $(tail -c 400 "$OUT/$tag.json")"
}

print_table() {
	echo
	echo "Mode $MODE, transport $TRANSPORT, on $(nproc) cores, ulimit -Hn $LIMIT, timeout ${TIMEOUT_MS} ms (presenced: ${SLOTS} slots x ${TICK}),"
	echo "ramp ${RAMP}s, hold ${HOLD}s (largest: ${HOLD_MAX}s), app ping every ${EVERY}, ${SILENT_PCT}% silent, ${USERS_PER} connections per user,"
	echo "rooms of ${ROOM} (client i in room-<i/${ROOM}>)$( ((BIG > 0)) && echo "; extra run: presenced, ${BIG} connections in one channel")."
	echo "Detection target: timeout + tick + 100 ms = $((TIMEOUT_MS + tick_ms + 100)) ms (p99)."
	if [[ -n ${SERVER_ENV:-} ]]; then echo "Servers' environment: $SERVER_ENV."; fi
	echo
	echo "| server | conns | connected | RSS/conn after ramp (KB) | RSS/conn held 60 s or end (KB) | CPU s / 1k keepalives | hold CPU / keepalives | detect p50 / p99 / max (ms) | silent closed (4408) | false closes | slow closes | frames sent / received (per client) | loadgen |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
	printf '%s\n' "${ROWS[@]}"
	targets
	floor_ratios
}

# floor_ratios: presenced's CPU per 1k keepalives and RSS per connection over
# the floor's, for every round and count in which both ran.
floor_ratios() {
	local r n p f
	[[ " $SERVERS " == *" presenced "* && " $SERVERS " == *" floor "* ]] || return 0
	echo
	echo "Distance to the floor (bench/floor: epoll, one thread, ping answered from pre-encoded bytes, 16 B per connection):"
	echo
	echo "| round | conns | presenced CPU s / 1k | floor CPU s / 1k | CPU ratio | presenced RSS B/conn ramp / held | floor RSS B/conn ramp / held | RSS ratio ramp / held |"
	echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
	for r in $(seq "$ROUNDS"); do
		for n in $COUNTS; do
			p=${COST["presenced,$n,$r"]:-}
			f=${COST["floor,$n,$r"]:-}
			[[ -n $p && -n $f ]] || continue
			local pc pm pe fc fm fe
			read -r pc pm pe <<<"$p"
			read -r fc fm fe <<<"$f"
			echo "| $r | $n | $pc | $fc | $(ratio "$pc" "$fc") | $pm / $pe | $fm / $fe | $(ratio "$pm" "$fm") / $(ratio "$pe" "$fe") |"
		done
	done
}

# targets: one line per count on the goals for presenced (one user per
# connection, rooms of ROOM): no false or slow closes, every silent client
# closed with 4408, detection p99 within timeout + tick + 100 ms, and RSS per
# connection at most 4 KB and at most 0.25x the baseline's in the same run,
# both right after the ramp and after 60 s of hold (or at its end).
mark() { if (($1)); then echo "met ($2)"; else echo "MISSED ($2)"; fi; }
# at_most A B: 1 when A and B are numbers and A <= B, else 0.
at_most() { awk -v a="$1" -v b="$2" 'BEGIN{ print (a ~ /^-?[0-9.]+$/ && b ~ /^[0-9.]+$/ && a + 0 <= b + 0) ? 1 : 0 }'; }
# ratio A B: A / B to two places, "-" unless both are numbers and B > 0.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a ~ /^-?[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a/b; else print "-" }'; }
targets() {
	local limit=$((TIMEOUT_MS + tick_ms + 100)) n
	echo
	echo "| conns | false closes 0 | slow closes 0 | all silent closed with 4408 | p99 <= ${limit} ms | RSS/conn ramp <= 4 KB | RSS/conn held <= 4 KB | ramp <= 0.25x baseline | held <= 0.25x baseline |"
	echo "|---:|---|---|---|---|---|---|---|---|"
	for n in $COUNTS; do
		local p=${RESULT["presenced,$n,$ROOM"]:-} b=${RESULT["baseline,$n,$ROOM"]:-}
		[[ -z $p ]] && continue
		local mid end p99 sc si fc slow bmid=- bend=- rmid rend
		read -r mid end p99 sc si fc slow <<<"$p"
		[[ -n $b ]] && read -r bmid bend _ <<<"$b"
		rmid=$(ratio "$mid" "$bmid")
		rend=$(ratio "$end" "$bend")
		echo "| $n | $(mark "${fc:-1} == 0" "$fc") | $(mark "${slow:-1} == 0" "$slow") | $(mark "${sc:-0} == ${si:-1}" "$sc / $si") |" \
			"$(mark "$(at_most "$p99" "$limit")" "$p99 ms") | $(mark "$(at_most "$mid" 4)" "$mid KB") | $(mark "$(at_most "$end" 4)" "$end KB") |" \
			"$(mark "$(at_most "$rmid" 0.25)" "$rmid") | $(mark "$(at_most "$rend" 0.25)" "$rend") |"
	done
}


# soak_row LABEL: one markdown row of presenced's goroutines and memory now.
soak_row() {
	local m
	m=$(curl -fsS "$HTTP/metrics")
	awk -v label="$1" -v rss="$(rss_kb "$SERVER_PID")" '
		$1 == "go_goroutines" {g = $2}
		$1 == "go_memstats_heap_alloc_bytes" {h = $2}
		$1 == "go_memstats_next_gc_bytes" {n = $2}
		$1 == "go_memstats_stack_inuse_bytes" {s = $2}
		END {printf "| %s | %d | %.1f | %.1f | %.1f | %.1f |\n", label, g, h/1048576, n/1048576, s/1048576, rss/1024}' <<<"$m"
}

soak() {
	local secs=${SOAK_SECS:-600} conns=${SOAK_CONNS:-5000} churn=${SOAK_CHURN:-1000}
	start_server presenced
	log "soak: ${secs}s, $conns steady clients, rounds of $churn churning clients (${SILENT_PCT}% silent)"
	"$OUT/loadgen" -transport "$TRANSPORT" -url "$URL" -conns "$conns" -ramp "${RAMP}s" -duration "$((RAMP + secs + 30))s" \
		-every "$EVERY" -users "$(((conns + USERS_PER - 1) / USERS_PER))" -room "$ROOM" -uid-prefix steady \
		-source-first 127.0.0.30 >"$OUT/soak-steady.json" 2>"$OUT/soak-steady.progress" &
	local steady=$!
	sleep $((RAMP + 5))
	local start_row end_row
	start_row=$(soak_row start)
	log "soak $start_row"
	local end=$((SECONDS + secs)) round=0 failed=0
	local churn_secs=$(((TIMEOUT_MS / 1000) + 15))
	while ((SECONDS + churn_secs + 5 < end)); do
		round=$((round + 1))
		"$OUT/loadgen" -transport "$TRANSPORT" -url "$URL" -conns "$churn" -ramp 5s -duration "$((5 + churn_secs))s" -every "$EVERY" \
			-silent $((churn * SILENT_PCT / 100)) -users "$(((churn + USERS_PER - 1) / USERS_PER))" -room "$ROOM" \
			-uid-prefix "churn$round-" -source-first 127.0.0.40 >>"$OUT/soak-churn.json" 2>/dev/null || {
			log "churn round $round: loadgen exit $?"
			failed=$((failed + 1))
		}
		log "soak $(soak_row "t=$((secs - end + SECONDS))s round $round")"
	done
	while ((SECONDS < end)); do sleep 1; done
	end_row=$(soak_row end)
	wait "$steady" || log "steady loadgen exit $?"
	echo
	echo "Soak: ${secs}s, $conns steady clients (app ping every $EVERY), $round churn rounds of $churn clients (${SILENT_PCT}% silent),"
	echo "$USERS_PER connections per user, rooms of $ROOM."
	echo
	echo "| | goroutines | heap alloc (MB) | heap goal (MB) | stacks (MB) | RSS (MB) |"
	echo "|---|---:|---:|---:|---:|---:|"
	echo "$start_row"
	echo "$end_row"
	echo
	echo "The heap goal is twice the live heap after the last GC (GOGC=100): the steadier figure."
	echo
	echo "steady clients: $(cat "$OUT/soak-steady.json")"
	echo "churn rounds that failed (a live client closed or a silent one not closed with 4408): $failed of $round"
}

build
if [[ $MODE == soak ]]; then
	soak
	exit 0
fi
largest=0
for n in $COUNTS; do ((n > largest)) && largest=$n; done
for round in $(seq "$ROUNDS"); do
	for n in $COUNTS; do
		hold=$HOLD
		((n == largest)) && hold=$HOLD_MAX
		for s in $SERVERS; do
			src=127.0.0.2
			[[ $s == baseline ]] && src=127.0.0.20
			[[ $s == floor ]] && src=127.0.0.30
			label=$s
			[[ $TRANSPORT == sse ]] && label="$s (sse)"
			((ROUNDS > 1)) && label="$label, round $round"
			run_one "$s" "$n" "$hold" "$src" "$ROOM" "$label" "$round"
		done
	done
done
if ((BIG > 0)) && [[ " $SERVERS " == *" presenced "* ]]; then
	run_one presenced "$BIG" "$HOLD" 127.0.0.2 "$BIG" "presenced, 1 channel of $BIG"
fi
print_table
echo
echo "Logs and loadgen JSON: $OUT"
