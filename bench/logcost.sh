#!/usr/bin/env bash
# logcost.sh: what a node's edges cost Redis, at two commits of presenced,
# interleaved: commands and CPU a second at rest with USERS users online, and
# the commands and CPU of a storm of STORM users going offline and coming
# back, with the webhook's delivery on (bench/logcost drives cluster.Engine).
#
#   BEFORE=<commit> AFTER=<commit, default the working tree> USERS=100000 STORM=10000 REST=30s ROUNDS=3 bench/logcost.sh
#
# Each run starts from an empty redis-server of its own on PORT (16391).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
: "${BEFORE:?set BEFORE to the commit to compare with}"
USERS=${USERS:-100000} STORM=${STORM:-10000} REST=${REST:-30s} ROUNDS=${ROUNDS:-3} PORT=${PORT:-16391}
work=$(mktemp -d)
cleanup() {
	redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
	git -C "$ROOT" worktree remove --force "$work/before" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# The program is this checkout's, built in each tree against that tree's presenced.
git -C "$ROOT" worktree add -q --detach "$work/before" "$BEFORE"
mkdir -p "$work/before/bench/logcost"
cp "$ROOT/bench/logcost/main.go" "$work/before/bench/logcost/"
cp "$ROOT/bench/go.mod" "$ROOT/bench/go.sum" "$work/before/bench/"
(cd "$work/before/bench" && go build -o "$work/logcost-before" ./logcost)
(cd "$ROOT/bench" && go build -o "$work/logcost-after" ./logcost)

redis-server --port "$PORT" --save '' --appendonly no --daemonize yes >/dev/null
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do sleep 0.1; done
for round in $(seq "$ROUNDS"); do
	for which in before after; do
		"$work/logcost-$which" -redis "127.0.0.1:$PORT" -users "$USERS" -storm "$STORM" -rest "$REST" -label "round $round, $which:"
	done
done
