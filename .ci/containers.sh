#!/usr/bin/env bash
# Issue 28's proof: the image built with Podman, run as deploy/compose.yaml confines it,
# deploy/compose.yaml brought up with podman-compose, the Kubernetes manifests run by
# podman kube play, and the manifests validated.
#
# No image registry is reachable from CI, so the base image is made from Debian's
# packages (mmdebstrap, then podman import) and passed as BASE_IMAGE. What only these
# machines need stays here, never in the shipped files: runc (crun refuses their
# cgroup v1 hybrid setup), explicit ulimits below the current hard limits (they lack
# CAP_SYS_RESOURCE), and the host's CA bundle and pip's use of it (their HTTPS goes
# through a proxy with a CA of its own).
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

missing=()
for tool in podman podman-compose mmdebstrap runc newuidmap iptables catatonit; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
# Compose's services find each other by name: with the CNI network backend that is the
# dnsname plugin (a recommendation of podman's, which --no-install-recommends leaves out).
[ -x /usr/lib/cni/dnsname ] || missing+=(dnsname)
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci: installing podman, mmdebstrap, runc, uidmap, catatonit and dnsname (missing: ${missing[*]})" >&2
  timeout 300 apt-get update -qq >"$work/apt.log" 2>&1
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends \
    podman podman-compose mmdebstrap runc uidmap containernetworking-plugins iptables \
    catatonit golang-github-containernetworking-plugin-dnsname \
    >>"$work/apt.log" 2>&1 \
    || { cat "$work/apt.log" >&2; exit 1; }
fi

nofile=$(( $(ulimit -Hn) < 4096 ? $(ulimit -Hn) : 4096 ))
nproc_hard=$(ulimit -Hu)
if [ "$nproc_hard" = unlimited ]; then nproc=8192; else nproc=$(( nproc_hard < 8192 ? nproc_hard : 8192 )); fi
cat > "$work/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF="$work/containers.conf"

base=localhost/baton-base:ci
image=localhost/baton:ci
echo "ci: making the base image from Debian's packages (mmdebstrap)" >&2
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
  --customize-hook='cp /etc/ssl/certs/ca-certificates.crt "$1/usr/local/share/ca-certificates/ci-host.crt"' \
  --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
  --customize-hook='printf "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n" > "$1/etc/pip.conf"' \
  bookworm "$work/base.tar"
podman import --quiet "$work/base.tar" "$base" >/dev/null
rm "$work/base.tar"

echo "ci: building the image (BASE_IMAGE=$base)" >&2
podman build --quiet --network host --format docker --build-arg "BASE_IMAGE=$base" \
  -t "$image" -f Containerfile . >/dev/null

echo "ci: building stand-ins for the postgres and caddy images compose.yaml names" >&2
for stand_in in postgres caddy; do
  podman build --quiet --network host --build-arg "BASE_IMAGE=$base" \
    -t "localhost/baton-ci-$stand_in" -f ".ci/images/$stand_in.Containerfile" .ci/images >/dev/null
done
export BATON_TEST_POSTGRES_IMAGE=localhost/baton-ci-postgres
export BATON_TEST_CADDY_IMAGE=localhost/baton-ci-caddy

echo "ci: validating the Kubernetes manifests against their schemas" >&2
python3 -m venv "$work/validate"
"$work/validate/bin/python" -m pip install --quiet --disable-pip-version-check kubernetes-validate
manifests=()
for manifest in deploy/kubernetes/*.yaml; do
  [ "$(basename "$manifest")" = kustomization.yaml ] || manifests+=("$manifest")
done
"$work/validate/bin/kubernetes-validate" --strict --quiet -k 1.33.0 "${manifests[@]}"

# A podman killed while it held one of its locks (a run stopped mid-test) leaves that
# lock held, and the next command that needs it waits forever. With no container
# running, `podman system renumber` hands every lock out anew; the tests themselves
# clear the pods, containers and volume an earlier run may have left behind.
if [ -z "$(timeout 60 podman ps --quiet)" ]; then
  timeout 120 podman system renumber
fi

echo "ci: running the image's containers, compose.yaml and the manifests (tests/deploy)" >&2
BATON_TEST_IMAGE="$image" .venv/bin/python -m pytest -q -n 0 tests/deploy
