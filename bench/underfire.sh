#!/usr/bin/env bash
# bench/underfire.sh: builds presenced and bench/underfire, then measures the
# server under bursts, floods, a freeze, reconnect races, abuse, churn and a
# lost cluster node (about 3 minutes; the freeze alone takes a minute).
# Prints one line of figures per scenario and a markdown table at the end.
#
#   bench/underfire.sh                     every scenario
#   bench/underfire.sh -only burst,flood   some of them (see -h)
#   BEFORE=d72df13 bench/underfire.sh      every scenario on d72df13 too (twice as long)
#
# Arguments go to underfire. PRESENCED_BIN names a binary to use instead of
# building ./cmd/presenced (the working tree, with any uncommitted change);
# BEFORE a commit whose ./cmd/presenced is built (from `git archive`, not the
# working tree) and measured the same way for the before column, or
# PRESENCED_BEFORE_BIN a binary for it; OUT a directory for the binaries and
# the servers' logs [a new temporary directory]. The cluster cases need
# redis-server on PATH. All load stays on 127.0.0.1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$(mktemp -d /tmp/presenced-underfire.XXXXXX)}
mkdir -p "$OUT/logs"

if [[ -n ${PRESENCED_BIN:-} ]]; then
	cp "$PRESENCED_BIN" "$OUT/presenced"
else
	(cd "$ROOT" && go build -o "$OUT/presenced" ./cmd/presenced)
fi
before=()
if [[ -n ${PRESENCED_BEFORE_BIN:-} ]]; then
	cp "$PRESENCED_BEFORE_BIN" "$OUT/presenced-before"
	before=(-before "$OUT/presenced-before")
elif [[ -n ${BEFORE:-} ]]; then
	rev=$(git -C "$ROOT" rev-parse --short "$BEFORE^{commit}")
	mkdir -p "$OUT/src-$rev"
	git -C "$ROOT" archive "$rev" | tar -x -C "$OUT/src-$rev"
	(cd "$OUT/src-$rev" && go build -o "$OUT/presenced-before" ./cmd/presenced)
	echo "underfire: before is $rev" >&2
	before=(-before "$OUT/presenced-before")
fi
(cd "$ROOT/bench" && go build -o "$OUT/underfire" ./underfire)
echo "underfire: binaries and logs in $OUT" >&2
exec "$OUT/underfire" -bin "$OUT/presenced" "${before[@]}" -logs "$OUT/logs" "$@"
