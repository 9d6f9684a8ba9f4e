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
TMPDIR_E2E="$(mktemp -d)"

log() { printf '%s e2e: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

cleanup() {
  if [[ -z "${KEEP:-}" ]]; then
    log "deleting cluster $CLUSTER"
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -rf "$TMPDIR_E2E"
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

# A router is ready once it knows the pools (none yet): it holds or refuses requests
# itself, so `helm install --wait` succeeds before any pool exists (operator issue, item 1).
log "the router is ready with no pool: GET /ready"
kubectl -n preheat-system port-forward svc/preheat-router 18080:8080 >/dev/null 2>&1 &
PF=$!
trap 'kill $PF 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 30); do
  curl -s -m 2 -o /dev/null http://127.0.0.1:18080/ready && break
  sleep 1
done
code="$(curl -s -m 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:18080/ready)"
[[ "$code" == 200 ]] || { log "router /ready answered $code before any pool (want 200)"; exit 1; }

# pool-minimal, with an objective so that the traffic below can scale it (the cluster tier,
# tests/cluster, does the same): concurrency 2 per replica, a short window.
log "applying examples/pool-minimal.yaml, then a concurrency objective on it"
kubectl -n "$NS" apply -f "$ROOT/examples/pool-minimal.yaml"
kubectl -n "$NS" patch "ipool/$POOL" --type merge -p '{"spec": {"autoscaling": {
  "objectives": [{"signal": "concurrency", "perReplica": 2}], "window": "10s",
  "scaleUp": {"cooldown": "0s"}}}}'
kubectl -n "$NS" wait --for=condition=Ready "ipool/$POOL" --timeout=300s
kubectl -n "$NS" get ipool,deploy,svc,pdb,pods -o wide

active() { kubectl -n "$NS" get "ipool/$POOL" -o jsonpath='{.status.replicas.active}'; }
log "active replicas before traffic: $(active)"

log "one streamed chat completion (the router names the worker)"
curl -sS -m 30 -D - -o /dev/null http://127.0.0.1:18080/v1/chat/completions \
  -H 'content-type: application/json' \
  -d "{\"model\":\"$POOL\",\"stream\":true,\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}" \
  | grep -i '^x-preheat-worker:' || { log "no X-Preheat-Worker: not served by a worker"; exit 1; }

# 16 at a time for 90 s; every answer's status is kept: a request that fails (curl error:
# 000, or 5xx) is counted, and more than 1% of them fails the run. A 429 is the router
# protecting the pool's tail (admission): counted apart, not a failure.
log "sending traffic through the router for 90 s"
codes="$TMPDIR_E2E/codes"
: >"$codes"
end=$((SECONDS + 90))
while (( SECONDS < end )); do
  pids=()
  for _ in $(seq 16); do
    curl -s -m 30 -o /dev/null -w '%{http_code}\n' http://127.0.0.1:18080/v1/completions \
      -H 'content-type: application/json' \
      -d "{\"model\":\"$POOL\",\"prompt\":\"hello $RANDOM\",\"max_tokens\":64}" \
      >>"$codes" 2>/dev/null &
    pids+=("$!")
  done
  wait "${pids[@]}" || true  # not a bare wait: that would wait for the port-forward too
done
total="$(wc -l <"$codes")"
ok="$(grep -c '^200$' "$codes" || true)"
limited="$(grep -c '^429$' "$codes" || true)"
failed=$((total - ok - limited))
log "requests: $total sent, $ok ok, $limited refused (429), $failed failed"
sort "$codes" | uniq -c >&2
if (( total == 0 || failed * 100 > total )); then
  log "more than 1% of the requests failed"
  exit 1
fi

log "watching the pool scale (at most 120 s)"
scaled=""
for _ in $(seq 60); do
  a="$(active)"
  if [[ "${a:-0}" -ge 2 ]]; then
    scaled="$a"
    break
  fi
  sleep 2
done
if [[ -z "$scaled" ]]; then
  log "did not scale above 1 active replica"
  kubectl -n "$NS" get "ipool/$POOL" -o yaml
  exit 1
fi
log "scaled: active=$scaled"
kubectl -n "$NS" get events --field-selector "involvedObject.name=$POOL"

# helm uninstall with the pool still there: the post-delete hook takes the operator's
# finalizer off, so the pool then deletes without the operator (operator issue, item 5).
log "helm uninstall with the pool left: the post-delete hook releases it"
kill "$PF" 2>/dev/null || true
helm uninstall preheat --namespace preheat-system --wait --timeout 180s
finalizers="$(kubectl -n "$NS" get "ipool/$POOL" -o jsonpath='{.metadata.finalizers}')"
[[ -z "$finalizers" ]] || { log "the pool still has finalizers: $finalizers"; exit 1; }
kubectl -n "$NS" delete "ipool/$POOL" --timeout=60s
kubectl -n "$NS" wait --for=delete "deploy/$POOL-workers" --timeout=120s
log "done"
