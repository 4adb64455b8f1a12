#!/usr/bin/env bash
# A real single-node Kubernetes (etcd, kube-apiserver, controller-manager, scheduler, kubelet on containerd+runc)
# for the kubernetes provider's integration tests, built from source through the Go module proxy.
#
# Usage (as root): cluster.sh build|images|up|down|print-env
#                  cluster.sh image-sandboxd BINARY TAG   (a local image holding a static sandboxd as /sandboxd)
#   build   builds etcd, kube-apiserver, kubelet, kube-controller-manager, kube-scheduler and kubectl once per
#           version into $CACHE (outside the clone, so a repeated CI run on the same machine skips it):
#           ~9 min cold on 2 cores, a no-op when cached.
#   images  builds the pause and busybox image tars (no registry is needed or used).
#   up      starts the cluster (~15 s) and imports the images; KUBECONFIG=$BASE/admin.kubeconfig afterwards.
#           The storage class "hostpath" provisions claims as directories under /tmp/hostpath_pv.
#   down    stops everything and removes its mounts, bridge, iptables chains and cgroups.
#   print-env prints the KUBECONFIG and PATH lines to eval.
# Needs: apt-get install -y --no-install-recommends containerd runc containernetworking-plugins busybox-static
# Env: BASE (run state, default /tmp/sandboxd-k8s), CACHE (default /var/cache/sandboxd-k8s), K8S_VERSION (1.34.2),
#      ETCD_VERSION (3.6.4). Pods must use imagePullPolicy: Never with local.test/busybox:1 or imported images.
set -euo pipefail
BASE=${BASE:-/tmp/sandboxd-k8s}
K8S_VERSION=${K8S_VERSION:-1.34.2}
ETCD_VERSION=${ETCD_VERSION:-3.6.4}
CACHE=${CACHE:-/var/cache/sandboxd-k8s}
VCACHE=$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION
export GOMODCACHE=${K8S_GOMODCACHE:-$CACHE/gomod} GOCACHE=${K8S_GOCACHE:-$CACHE/gocache}
export GOFLAGS=-mod=mod
BIN=$VCACHE/bin PKI=$BASE/pki
NODE_IP=${NODE_IP:-$(ip -4 route get 1.1.1.1 | sed -n 's/.* src \([0-9.]*\).*/\1/p')}
NODE_NAME=${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
KUBECTL=$BIN/kubectl
mkdir -p "$BASE" "$VCACHE"

build() {
  local bins=(etcd kube-apiserver kubelet kube-controller-manager kube-scheduler kubectl) missing=0
  for b in "${bins[@]}"; do [ -x "$BIN/$b" ] || missing=1; done
  if [ $missing = 0 ]; then echo "cluster.sh: binaries for $K8S_VERSION/$ETCD_VERSION cached in $BIN"; return; fi
  local tmp=$VCACHE/bin.tmp src=$VCACHE/src
  rm -rf "$tmp"; mkdir -p "$tmp" "$src/k8s" "$src/etcd"
  local mod=$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod
  go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null
  ( cd "$src/k8s"
    { printf 'module k8sbuild\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S_VERSION"
      sed -n '/^replace (/,/^)/p' "$mod" | grep '=>' | awk -v v="v0.${K8S_VERSION#1.}" '{print "\t"$1" => "$1" "v}'
      echo ')'; } > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport (\n' > tools.go
    for c in kube-apiserver kubelet kube-controller-manager kube-scheduler kubectl; do
      echo "	_ \"k8s.io/kubernetes/cmd/$c\"" >> tools.go; done
    echo ')' >> tools.go
    go mod tidy
    LD="-s -w"; for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      LD="$LD -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) -X $p.gitTreeState=clean"; done
    go build -ldflags="$LD" -o "$tmp/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubelet \
      k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl )
  ( cd "$src/etcd"
    printf 'module etcdbuild\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n\nreplace (\n' "$ETCD_VERSION" > go.mod
    for m in api/v3 client/pkg/v3 client/v3 pkg/v3; do echo "	go.etcd.io/etcd/$m => go.etcd.io/etcd/$m v$ETCD_VERSION" >> go.mod; done
    echo ')' >> go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    go mod tidy
    go build -ldflags="-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3 )
  mkdir -p "$BIN"; mv "$tmp"/* "$BIN/"; rmdir "$tmp"
}

# docker-archive tar from a rootfs dir (no registry needed)
mkimage() { python3 - "$@" <<'EOF'
import sys, tarfile, hashlib, json, io, os
rootfs, out, tag, ep, cmd = sys.argv[1:6]
layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode='w', format=tarfile.PAX_FORMAT) as t:
    for n in sorted(os.listdir(rootfs)): t.add(os.path.join(rootfs, n), arcname=n)
lb = layer.getvalue(); diff = hashlib.sha256(lb).hexdigest()
cfg = {"architecture": "amd64", "os": "linux", "config": {"Entrypoint": json.loads(ep), "Cmd": json.loads(cmd),
       "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
       "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff]}}
cb = json.dumps(cfg).encode(); cd = hashlib.sha256(cb).hexdigest()
with tarfile.open(out, 'w') as t:
    def add(n, b):
        ti = tarfile.TarInfo(n); ti.size = len(b); ti.mode = 0o644; t.addfile(ti, io.BytesIO(b))
    add(cd + ".json", cb); add(diff + "/layer.tar", lb)
    add("manifest.json", json.dumps([{"Config": cd + ".json", "RepoTags": [tag], "Layers": [diff + "/layer.tar"]}]).encode())
EOF
}

images() {
  local d=$BASE/images; rm -rf "$d"; mkdir -p "$d/pause-src" "$d/pause/" "$d/busybox/bin" "$d/busybox/tmp" "$d/busybox/etc"
  printf 'package main\n\nimport (\n\t"os"\n\t"os/signal"\n\t"syscall"\n)\n\nfunc main() {\n\tc := make(chan os.Signal, 1)\n\tsignal.Notify(c, syscall.SIGINT, syscall.SIGTERM)\n\t<-c\n}\n' > "$d/pause-src/main.go"
  printf 'module pause\n\ngo 1.24\n' > "$d/pause-src/go.mod"
  (cd "$d/pause-src" && CGO_ENABLED=0 go build -ldflags='-s -w' -o "$d/pause/pause" .)
  cp /bin/busybox "$d/busybox/bin/busybox"   # apt: busybox-static
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$d/busybox/bin/$a"; done
  chmod 1777 "$d/busybox/tmp"
  echo 'root:x:0:0:root:/root:/bin/sh' > "$d/busybox/etc/passwd"
  mkimage "$d/pause" "$d/pause.tar" local.test/pause:3.6 '["/pause"]' 'null'
  mkimage "$d/busybox" "$d/busybox.tar" local.test/busybox:1 'null' '["/bin/sh"]'
}

# image-sandboxd BINARY TAG: an image whose only file is the static sandboxd binary, imported into the running
# cluster's containerd (the kubernetes provider's init container copies it into the Pod's shared volume).
image-sandboxd() {
  local binary=$1 tag=$2 d=$BASE/images/sandboxd
  rm -rf "$d"; mkdir -p "$d/root"
  cp "$binary" "$d/root/sandboxd"; chmod 0755 "$d/root/sandboxd"
  mkimage "$d/root" "$d/sandboxd.tar" "$tag" '["/sandboxd"]' 'null'
  ctr -a "$BASE/containerd/containerd.sock" -n k8s.io images import "$d/sandboxd.tar" >/dev/null
}

pki() {
  mkdir -p "$PKI"; cd "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -subj /CN=ci-ca -days 30 -out ca.crt 2>/dev/null
  cert() { # name subj ext
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
    printf '%s\n' "[e]" "$3" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile "$1.ext" -extensions e -out "$1.crt" 2>/dev/null; }
  cert apiserver /CN=kube-apiserver "subjectAltName=IP:127.0.0.1,IP:$NODE_IP,IP:10.0.0.1,DNS:localhost,DNS:kubernetes.default.svc"
  cert admin "/O=system:masters/CN=admin" "extendedKeyUsage=clientAuth"
  cert node "/O=system:nodes/CN=system:node:$NODE_NAME" "extendedKeyUsage=clientAuth"
  cert kubelet "/CN=$NODE_NAME" "subjectAltName=IP:127.0.0.1,IP:$NODE_IP,DNS:$NODE_NAME"
  openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  for u in admin node; do KUBECONFIG=$BASE/$u.kubeconfig sh -c "
    '$KUBECTL' config set-cluster ci --server=https://127.0.0.1:6443 --certificate-authority=$PKI/ca.crt --embed-certs
    '$KUBECTL' config set-credentials $u --client-certificate=$PKI/$u.crt --client-key=$PKI/$u.key --embed-certs
    '$KUBECTL' config set-context ci --cluster=ci --user=$u; '$KUBECTL' config use-context ci" >/dev/null; done
  cd - >/dev/null
}

start() { # name cmd...
  local n=$1; shift; mkdir -p "$BASE/run/$n"
  nohup "$@" > "$BASE/run/$n/log" 2>&1 & echo $! > "$BASE/run/$n/pid"; }

up() {
  [ -x "$BIN/kube-apiserver" ] || { echo "cluster.sh: run build first" >&2; exit 1; }
  [ -f "$BASE/images/busybox.tar" ] || images
  [ -f "$PKI/ca.crt" ] || pki
  export KUBECONFIG=$BASE/admin.kubeconfig
  start etcd "$BIN/etcd" --data-dir "$BASE/data/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
    --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster default=http://127.0.0.1:2380
  start apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 --bind-address=127.0.0.1 --secure-port=6443 \
    --advertise-address="$NODE_IP" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=Node,RBAC --allow-privileged=true \
    --kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key" --kubelet-certificate-authority="$PKI/ca.crt"
  mkdir -p "$BASE/containerd" "$BASE/cni/net.d" "$BASE/kubelet/root" "$BASE/kubelet/logs"
  containerd config default | sed -e "s#^root = .*#root = \"$BASE/containerd/root\"#" \
    -e "s#^state = .*#state = \"$BASE/containerd/state\"#" \
    -e "s#address = \"/run/containerd/containerd.sock\"#address = \"$BASE/containerd/containerd.sock\"#" \
    -e 's#bin_dir = "/opt/cni/bin"#bin_dir = "/usr/lib/cni"#' -e "s#conf_dir = \"/etc/cni/net.d\"#conf_dir = \"$BASE/cni/net.d\"#" \
    -e 's#restrict_oom_score_adj = false#restrict_oom_score_adj = true#' \
    -e 's#sandbox_image = ".*"#sandbox_image = "local.test/pause:3.6"#' > "$BASE/containerd/config.toml"
  cat > "$BASE/cni/net.d/10-bridge.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "ci", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$BASE/cni/ipam"}},
  {"type": "loopback"}]}
EOF
  start containerd containerd --config "$BASE/containerd/config.toml"
  local A=$BASE/containerd/containerd.sock
  for i in $(seq 50); do [ -S "$A" ] && break; sleep 0.2; done
  for img in pause busybox; do ctr -a "$A" -n k8s.io images import "$BASE/images/$img.tar" >/dev/null; done
  for i in $(seq 120); do [ "$("$KUBECTL" get --raw /readyz 2>/dev/null)" = ok ] && break; sleep 0.5; done
  cat > "$BASE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
readOnlyPort: 0
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $PKI/ca.crt}}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$A
failSwapOn: false
failCgroupV1: false
enforceNodeAllocatable: []
podLogsDir: $BASE/kubelet/logs
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  start kubelet "$BIN/kubelet" --config="$BASE/kubelet/config.yaml" --kubeconfig="$BASE/node.kubeconfig" \
    --root-dir="$BASE/kubelet/root" --node-ip="$NODE_IP" --hostname-override="$NODE_NAME"
  start kcm "$BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" --bind-address=127.0.0.1 \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" --use-service-account-credentials --leader-elect=false \
    --enable-hostpath-provisioner=true
  start scheduler "$BIN/kube-scheduler" --kubeconfig="$KUBECONFIG" --bind-address=127.0.0.1 --leader-elect=false
  for i in $(seq 120); do "$KUBECTL" get "node/$NODE_NAME" >/dev/null 2>&1 && break; sleep 0.5; done
  "$KUBECTL" wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s
  for i in $(seq 60); do "$KUBECTL" -n default get sa default >/dev/null 2>&1 && break; sleep 0.5; done
  # Claims of the class "hostpath" get a directory under /tmp/hostpath_pv on the node, made by the
  # controller-manager's own provisioner, which is for single-node test clusters only (no size limit).
  "$KUBECTL" apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: hostpath}
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
EOF
}

down() {
  export KUBECONFIG=$BASE/admin.kubeconfig
  if [ -f "$BASE/run/apiserver/pid" ] && kill -0 "$(cat "$BASE/run/apiserver/pid")" 2>/dev/null; then
    "$KUBECTL" delete pods --all -A --grace-period=1 --wait=true --timeout=60s >/dev/null 2>&1 || true
  fi
  for n in scheduler kcm kubelet containerd apiserver etcd; do
    if [ -f "$BASE/run/$n/pid" ]; then kill "$(cat "$BASE/run/$n/pid")" 2>/dev/null || true; sleep 0.5; fi; done
  for n in apiserver etcd containerd; do p=$(cat "$BASE/run/$n/pid" 2>/dev/null) || continue
    for i in $(seq 60); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done; done
  # leftover containers (shims) started by this containerd, mounts, bridge, cgroups
  for f in "$BASE"/containerd/state/io.containerd.runtime.v2.task/k8s.io/*/init.pid; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done; true
  # their shims outlive the containerd that started them
  pkill -KILL -f -- "containerd-shim-runc-v2 .*-address $BASE/containerd/containerd.sock" 2>/dev/null || true
  mount | awk -v b="$BASE" '$3 ~ "^"b {print $3}' | sort -r | xargs -r -n1 umount -l
  ip link del cni0 2>/dev/null || true
  for ipt in iptables ip6tables; do  # chains the kubelet creates
    command -v $ipt >/dev/null || continue
    $ipt -D INPUT -j KUBE-FIREWALL 2>/dev/null || true; $ipt -D OUTPUT -j KUBE-FIREWALL 2>/dev/null || true
    for t in filter nat mangle; do for c in $($ipt -t $t -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^KUBE-/ {print $2}'); do
      $ipt -t $t -F "$c" || true; $ipt -t $t -X "$c" || true; done; done; done
  for s in /sys/fs/cgroup/*/kubepods; do [ -d "$s" ] && find "$s" -depth -type d -exec rmdir {} \; 2>/dev/null; done; true
  rm -rf "$BASE/run" "$BASE/data" "$BASE/containerd" "$BASE/kubelet" "$BASE/cni" /tmp/hostpath_pv
}

print-env() {
  echo "export KUBECONFIG=$BASE/admin.kubeconfig"
  echo "export PATH=$BIN:\$PATH"
}

"$@"
