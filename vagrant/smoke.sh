#!/usr/bin/env bash
# Smoke test on the Vagrant cluster: ClusterIP, NodePort, an externalIP and an
# externalTrafficPolicy: Local service, each checked with real requests. Prints PASS/FAIL lines
# and exits non-zero when anything failed.
set -uo pipefail
export KUBECONFIG=${KUBECONFIG:-/etc/kubernetes/admin.conf}
failed=0
check() { # name, command
  if eval "$2" >/dev/null 2>&1; then echo "PASS $1"; else echo "FAIL $1"; failed=1; fi
}

kubectl create namespace smoke --dry-run=client -o yaml | kubectl apply -f -
kubectl -n smoke create deployment echo --image=registry.k8s.io/e2e-test-images/agnhost:2.53 \
  --replicas=2 -- /agnhost netexec --http-port=8080 --dry-run=client -o yaml | kubectl apply -f -
kubectl -n smoke expose deployment echo --name=cip --port=80 --target-port=8080 --dry-run=client -o yaml | kubectl apply -f -
kubectl -n smoke expose deployment echo --name=np --type=NodePort --port=80 --target-port=8080 --dry-run=client -o yaml | kubectl apply -f -
kubectl -n smoke expose deployment echo --name=ext --port=80 --target-port=8080 --external-ip=192.168.56.10 --dry-run=client -o yaml | kubectl apply -f -
kubectl -n smoke expose deployment echo --name=local --type=NodePort --port=80 --target-port=8080 --dry-run=client -o yaml \
  | sed 's/^spec:/spec:\n  externalTrafficPolicy: Local/' | kubectl apply -f -
kubectl -n smoke rollout status deployment/echo --timeout=180s

cip=$(kubectl -n smoke get svc cip -o jsonpath='{.spec.clusterIP}')
np=$(kubectl -n smoke get svc np -o jsonpath='{.spec.ports[0].nodePort}')
lp=$(kubectl -n smoke get svc local -o jsonpath='{.spec.ports[0].nodePort}')
echo_node=$(kubectl -n smoke get pod -l app=echo -o jsonpath='{.items[0].status.hostIP}')

check "ClusterIP from the node"        "curl -sf --max-time 3 http://$cip/hostname"
check "NodePort on the control plane"  "curl -sf --max-time 3 http://192.168.56.10:$np/hostname"
check "externalIP"                     "curl -sf --max-time 3 http://192.168.56.10/hostname"
check "eTP Local on a node with an endpoint" "curl -sf --max-time 3 http://$echo_node:$lp/hostname"
check "kubenft table present"          "nft list table ip kubenft"
exit $failed
