#!/usr/bin/env bash
# End-to-end on a real cluster: kind + the Helm chart + a simulated pool.
#
#   e2e/run.sh            # create cluster, build + load images, install, apply, drive, check
#   KEEP=1 e2e/run.sh     # keep the cluster afterwards (kind delete cluster --name preheat-e2e)
#
# Needs docker (with a running engine), kind and kubectl on PATH, and helm: the one `make
# helm` puts in .cache/tools (as `make test` does) when it is there, else helm on PATH.
# Every step is bounded by a timeout; the script exits non-zero at the first failed check.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CLUSTER="${CLUSTER:-preheat-e2e}"
NS="${NS:-serving}"
TAG="${TAG:-0.1.0}"
POOL=sim-tiny

log() { printf '%s e2e: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

cleanup() {
  if [[ -z "${KEEP:-}" ]]; then
    log "deleting cluster $CLUSTER"
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

TOOLS_DIR="$ROOT/.cache/tools"
if [[ -x "$TOOLS_DIR/helm" ]]; then
  PATH="$TOOLS_DIR:$PATH"
fi

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { log "missing $tool"; exit 2; }
done
docker info >/dev/null 2>&1 || { log "docker has no running engine"; exit 2; }

log "creating kind cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --wait 120s

log "building images"
docker build -q -f "$ROOT/Dockerfile.operator" -t "preheat-control:$TAG" "$ROOT"
docker build -q -f "$ROOT/Dockerfile.worker" -t "preheat-worker:$TAG" "$ROOT"
kind load docker-image --name "$CLUSTER" "preheat-control:$TAG" "preheat-worker:$TAG"

log "installing the chart (watching namespace $NS)"
kubectl create namespace "$NS"
helm install preheat "$ROOT/charts/preheat" --namespace preheat-system --create-namespace \
  --set "operator.watchNamespaces={$NS}" --wait --timeout 180s

log "applying examples/pool-minimal.yaml"
kubectl -n "$NS" apply -f "$ROOT/examples/pool-minimal.yaml"
kubectl -n "$NS" wait --for=condition=Ready "ipool/$POOL" --timeout=300s
kubectl -n "$NS" get ipool,deploy,svc,pdb,pods -o wide

# pool-minimal has no objectives (no autoscaling): give it one, as the cluster tier
# (tests/cluster, step 3) does, so the traffic below can scale it.
log "autoscaling the pool on concurrency (2 per replica)"
kubectl -n "$NS" patch "ipool/$POOL" --type merge -p '{"spec": {"autoscaling": {
  "objectives": [{"signal": "concurrency", "perReplica": 2}], "window": "10s",
  "scaleUp": {"cooldown": "0s"}}}}'

active() { kubectl -n "$NS" get "ipool/$POOL" -o jsonpath='{.status.replicas.active}'; }
log "active replicas before traffic: $(active)"

log "sending traffic through the router for 90 s"
kubectl -n preheat-system port-forward svc/preheat-router 18080:8080 >/dev/null 2>&1 &
PF=$!
trap 'kill $PF 2>/dev/null || true; cleanup' EXIT
sleep 3
log "one streamed chat completion (the router names the worker)"
curl -sS -m 30 -D - -o /dev/null http://127.0.0.1:18080/v1/chat/completions \
  -H 'content-type: application/json' \
  -d "{\"model\":\"$POOL\",\"stream\":true,\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}" \
  | grep -i '^x-preheat-worker:' || { log "no X-Preheat-Worker: not served by a worker"; exit 1; }
end=$((SECONDS + 90))
while (( SECONDS < end )); do
  pids=()
  for _ in $(seq 16); do
    curl -s -m 30 -o /dev/null http://127.0.0.1:18080/v1/completions \
      -H 'content-type: application/json' \
      -d "{\"model\":\"$POOL\",\"prompt\":\"hello $RANDOM\",\"max_tokens\":64}" &
    pids+=("$!")
  done
  wait "${pids[@]}"  # not a bare wait: that would wait for the port-forward too (forever)
done

log "watching the pool scale (at most 120 s)"
for _ in $(seq 60); do
  a="$(active)"
  if [[ "${a:-0}" -ge 2 ]]; then
    log "scaled: active=$a"
    kubectl -n "$NS" get events --field-selector "involvedObject.name=$POOL"
    exit 0
  fi
  sleep 2
done
log "did not scale above 1 active replica"
kubectl -n "$NS" get "ipool/$POOL" -o yaml
exit 1
