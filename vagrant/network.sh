#!/usr/bin/env bash
# Minimal pod network without a CNI daemon: the standard bridge plugin on each node with the
# node's podCIDR, and static routes to the other nodes' podCIDRs. Run on every node after it
# joined (it waits until the control plane has assigned this node a podCIDR).
set -euo pipefail
export KUBECONFIG=/kubenft/vagrant/admin.conf
node=$(hostname)
for _ in $(seq 60); do
  cidr=$(kubectl get node "$node" -o jsonpath='{.spec.podCIDR}' 2>/dev/null || true)
  [ -n "$cidr" ] && break
  sleep 5
done
[ -n "$cidr" ] || { echo "no podCIDR for $node"; exit 1; }
mkdir -p /etc/cni/net.d
cat > /etc/cni/net.d/10-bridge.conf <<CONF
{
  "cniVersion": "1.0.0",
  "name": "pods",
  "type": "bridge",
  "bridge": "cni0",
  "isGateway": true,
  "ipMasq": false,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}
}
CONF
# Routes to every other node's pods.
kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}' |
  while read -r name podcidr ip; do
    [ "$name" = "$node" ] || [ -z "$podcidr" ] || ip route replace "$podcidr" via "$ip"
  done
