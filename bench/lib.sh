# Shared by bench/scale.sh and bench/fanout.sh; sourced, not run.

# field NAME JSON: a number field of a one-line JSON object.
field() { sed -nE "s/.*\"$1\":(-?[0-9.]+).*/\1/p" <<<"$2"; }

# stop_server stops the server started last (SERVER_PID), if it still runs.
SERVER_PID=
stop_server() {
	if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
		kill -TERM "$SERVER_PID"
		wait "$SERVER_PID" 2>/dev/null || true
	fi
	SERVER_PID=
}
trap stop_server EXIT

# build_presenced FILE: PRESENCED_BIN copied to FILE if set, else the working
# tree's ./cmd/presenced built there. ROOT is the repository. PRESENCED_BIN is
# then unset: presenced reads PRESENCED_* variables and would warn of it.
build_presenced() {
	if [[ -n ${PRESENCED_BIN:-} ]]; then
		cp "$PRESENCED_BIN" "$1"
		unset PRESENCED_BIN
	else
		(cd "$ROOT" && go build -o "$1" ./cmd/presenced)
	fi
}
