#!/usr/bin/env bash
# Builds kubenft's container image without any registry: a static (musl) kubenft compiled on
# this machine, put into an image FROM scratch by the Containerfile's `prebuilt` stage (the same
# final stage as a registry build). Tags it localhost/kubenft:VERSION, VERSION being the crate's
# version in Cargo.toml, the image deploy/daemonset.yaml names, and prints that name.
#
# Needs rustup, musl-gcc (Debian: musl-tools; ring's C code) and buildah: `bash .ci/setup-image`.
# To run it on a cluster without a registry, load it into each node's runtime, e.g.
#   podman save localhost/kubenft:VERSION | ctr -n k8s.io images import -
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in cargo rustup musl-gcc buildah; do
    command -v "$tool" >/dev/null || { echo "deploy/image.sh: $tool is missing (bash .ci/setup-image installs it)" >&2; exit 1; }
done

# `cargo pkgid` prints path+file:///…#kubenft@0.1.0 (or …/kubenft#0.1.0).
pkgid="$(cargo pkgid --quiet -p kubenft)"
image="localhost/kubenft:${pkgid##*[#@]}"

rustup target add x86_64-unknown-linux-musl >/dev/null 2>&1
# The same build command as the Containerfile's `compiled` stage, in a target directory of its
# own (cargo locks a target directory while it works, so this build can run beside the tests).
CARGO_PROFILE_RELEASE_STRIP=symbols cargo build --release --locked \
    --target x86_64-unknown-linux-musl --target-dir target/image --bin kubenft >&2
buildah build --quiet --build-arg BINARY=prebuilt --tag "$image" --file Containerfile . >&2
echo "$image"
