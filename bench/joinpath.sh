#!/usr/bin/env bash
# bench/joinpath.sh: the files and hops one join frame crosses on its way from
# the socket to the diff it causes, as the server runs it. Delve traces every
# call into presenced's packages and gorilla/websocket while transport's
# TestJoinPath runs (a join over a raw socket, then the tick that sends the
# other member's diff); bench/joinpath counts the calls between the test's
# two marks, by the file each function lives in.
#
#   bench/joinpath.sh        the counts
#   VERBOSE=1 bench/joinpath.sh   every visit too: goroutine, file, function
#
# Needs delve (go run fetches it from the module proxy the first time).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d /tmp/presenced-joinpath.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
cd "$ROOT"
go test -c -o "$OUT/transport.test" ./transport
GORILLA=$(go list -m -f '{{.Dir}}' github.com/gorilla/websocket)
(cd transport && go run github.com/go-delve/delve/cmd/dlv@v1.27.2 trace --exec "$OUT/transport.test" \
	'^(github\.com/presenced/presenced/(transport|presence|tracker|protocol|internal)|github\.com/gorilla/websocket)[./]|joinPath(Begins|Ends)' \
	-- -test.run '^TestJoinPath$' >"$OUT/stdout" 2>"$OUT/trace")
grep -q '^PASS' "$OUT/stdout" || { cat "$OUT/stdout" >&2; echo "joinpath: TestJoinPath failed" >&2; exit 1; }
cd "$ROOT/bench"
go run ./joinpath -repo "$ROOT" -gorilla "$GORILLA" -trace "$OUT/trace" ${VERBOSE:+-v}
