#!/usr/bin/env bash
# The main job of `make run`: one real VM through a crash loop and its
# recovery. virt-controller runs examples/vm-crashloop.yaml (three real QEMU
# start failures, then a boot) on KubeVirt's backoff compressed by
# TIME_SCALE; this script waits until the VM is Running with its
# startFailure record cleared, shows its status, stops it, and cleans up
# the controller (by its PID) and the state folder.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../_build/bin}
images=${IMAGES:-$here/../_build/images}
scale=${TIME_SCALE:-0.1}
seed=${SEED:-1}
manifest=${MANIFEST:-$here/vm-crashloop.yaml}
name=${VM_NAME:-demo}
state=$(mktemp -d /tmp/crashloop-demo.XXXXXX)
ctl=""
cleanup() {
	if [[ -n "$ctl" ]] && kill -0 "$ctl" 2>/dev/null; then
		kill -TERM "$ctl"
		wait "$ctl" || true
	fi
	rm -rf "$state"
}
trap cleanup EXIT

echo "== virt-controller: $manifest, time scale $scale (KubeVirt's 10 s x n^2 becomes $(awk "BEGIN{print 10*$scale}") s x n^2), seed $seed"
"$bin/virt-controller" run --state-dir "$state" --time-scale "$scale" --seed "$seed" \
	--launcher-arg="--image-dir=$images" --log-level warn -o "${OUTPUT:-text}" "$manifest" &
ctl=$!

status() { "$bin/virt-controller" status "$name" --state-dir "$state" -o json 2>/dev/null || true; }
deadline=$((SECONDS + 300))
until out=$(status) && grep -q '"printableStatus": "Running"' <<<"$out" && ! grep -q '"startFailure"' <<<"$out" \
	&& grep -q '"ready": true' <<<"$out"; do
	if ((SECONDS > deadline)); then
		echo "demo: the VM did not recover within 300 s" >&2
		"$bin/virt-controller" status --state-dir "$state" >&2 || true
		exit 1
	fi
	if ! kill -0 "$ctl" 2>/dev/null; then
		echo "demo: virt-controller exited early" >&2
		exit 1
	fi
	sleep 0.5
done
echo
echo "== recovered: Running, startFailure cleared"
"$bin/virt-controller" status --state-dir "$state"
"$bin/virt-controller" stop "$name" --state-dir "$state" >/dev/null
echo "== stopped; the controller's state folder is removed on exit"
