#!/usr/bin/env bash
# Set up this checkout on a fresh Debian/Ubuntu machine and run the main job or the tests.
#
#   sudo ./bootstrap.sh bench [sparkfleet run args...]   # bench.yml on the default (localhost) inventory + report
#   sudo ./bootstrap.sh bench quick ENGINE MODEL [...]     # the quick path instead: sparkfleet quick (README, top)
#   sudo ./bootstrap.sh test  [pytest args...]             # lint, syntax and sanity checks, unit + end-to-end tests
#
# Idempotent: packages and virtualenvs already in place are reused. Without root, the apt step is
# skipped (with a note) and the tests that need root are skipped with their reason.
set -euo pipefail

# The Docker engine to install, printed on stdout: nothing when this machine has one already. Docker's docker-ce
# (with containerd.io, from Docker's or NVIDIA's repositories, as DGX OS ships it), moby-engine and Debian's
# docker.io conflict with each other: installing docker.io would make apt remove the engine the host runs. A
# dockerd on PATH, or any of these packages installed (dpkg-query), is reused; docker.io is installed only where
# there is no Docker engine and no Docker package at all. tests/unit/test_bootstrap_docker.py runs it with a fake dpkg-query.
DOCKER_PACKAGES=(docker-ce docker-ce-cli containerd.io moby-engine moby-cli docker.io)
docker_to_install() {
  local pkg found=""
  # An engine (dockerd) is what the tests and the bench need; a client binary alone (a static docker in
  # /usr/local/bin, no package) is not one, and docker.io beside it conflicts with nothing dpkg knows.
  command -v dockerd >/dev/null 2>&1 && found=$(command -v dockerd)
  if [ -z "$found" ]; then
    for pkg in "${DOCKER_PACKAGES[@]}"; do
      case "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" in
        *" installed") found="package $pkg"; break ;;
      esac
    done
  fi
  if [ -n "$found" ]; then
    echo "note: Docker found ($found): reused, no Docker package installed" >&2
  else
    echo docker.io
  fi
}
# Sourced (the tests): the function above only, nothing run.
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

cd "$(dirname "$(readlink -f "$0")")"

mode=${1:-}
[ $# -gt 0 ] && shift
case "$mode" in
  bench|test) ;;
  *) echo "usage: $0 bench|test [args...]" >&2; exit 2 ;;
esac

say() { printf '\n==> %s\n' "$*"; }

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "note: not root, cannot install ${missing[*]}; tests that need them will be skipped" >&2
    return 0
  fi
  say "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# A venv for one interpreter; pip resolves ansible-core 2.19 on Python 3.11, the newest on 3.12+. SPEC is what pip
# installs: '.[dev]' (the default: the tests' tools too) or '.' (the main job and the quick path: the package alone,
# a shorter first install); each has its own marker, so a later `test` adds the dev tools to the same venv.
make_venv() {
  local dir=$1 python=$2 spec=${3:-.[dev]}
  local marker="$dir/.installed${spec#.}"
  if [ ! -x "$dir/bin/python" ] || ! "$dir/bin/python" -c 'import sparkfleet' 2>/dev/null \
     || [ pyproject.toml -nt "$marker" ]; then
    say "virtualenv $dir ($("$python" --version 2>&1), $spec)"
    "$python" -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check -U pip
    "$dir/bin/pip" install -q --disable-pip-version-check -e "$spec"
    touch "$marker"
  fi
  # The venv lists <root> (the checkout is <root>/ansible_collections/<ns>/<name>): Ansible finds the collection
  # on sys.path and the package imports its code by the same name.
  local site
  site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$collection_root" > "$site/sparkfleet-collection.pth"
}

# The checkout is the collection <ns>.<name> (galaxy.yml) and must sit at <root>/ansible_collections/<ns>/<name>,
# where Ansible looks for collections (community.general's layout for a development checkout).
ns=$(sed -n 's/^namespace: *//p' galaxy.yml)
name=$(sed -n 's/^name: *//p' galaxy.yml)
here=$(pwd -P)
case "$here" in
  */ansible_collections/"$ns"/"$name") collection_root=${here%/ansible_collections/"$ns"/"$name"} ;;
  *) echo "error: this checkout is the Ansible collection $ns.$name and must sit at <dir>/ansible_collections/$ns/$name" \
       "(it is at $here); clone it there: git clone <url> ansible_collections/$ns/$name" >&2; exit 2 ;;
esac

# The newest CPython >= 3.12 on this machine (Debian's, deadsnakes', or pyenv's), if any.
newest_python() {
  local candidates=()
  for v in 3.14 3.13 3.12; do
    command -v "python$v" >/dev/null 2>&1 && "python$v" --version >/dev/null 2>&1 && candidates+=("$(command -v "python$v")")
    for p in "$HOME"/.pyenv/versions/"$v".*/bin/python"$v" /root/.pyenv/versions/"$v".*/bin/python"$v"; do
      [ -x "$p" ] && candidates+=("$p")
    done
  done
  [ ${#candidates[@]} -gt 0 ] && echo "${candidates[0]}"
  return 0
}

base_pkgs=(python3 python3-venv python3-pip git)

# dockerd (docker.io's or docker-ce's): started through systemd where there is one, else in the background.
start_docker() {
  command -v docker >/dev/null 2>&1 || return 0
  docker info >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null 2>&1 || { echo "note: a docker client but no dockerd here; Docker is not running" >&2; return 0; }
  [ "$(id -u)" -eq 0 ] || { echo "note: Docker is not running and only root can start it" >&2; return 0; }
  if [ -d /run/systemd/system ]; then
    systemctl start docker
  else
    nohup dockerd >/var/log/sparkfleet-dockerd.log 2>&1 &
  fi
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
  echo "dockerd did not start: see /var/log/sparkfleet-dockerd.log" >&2
  return 1
}

if [ "$mode" = bench ] && [ "${1:-}" = quick ]; then
  # The quick path: one serving campaign from flags, the engine as this machine has it (bare by default): no image
  # to build, so no debootstrap; Docker only where it is already installed (--environment container uses it).
  shift
  apt_install "${base_pkgs[@]}"
  start_docker
  make_venv .venv python3 .
  say "sparkfleet quick $*"
  exec .venv/bin/sparkfleet quick "$@"
fi

if [ "$mode" = bench ]; then
  # The sanity campaign builds its image with debootstrap and runs it natively (chroot) and in Docker.
  docker_pkg=$(docker_to_install)
  apt_install "${base_pkgs[@]}" ${docker_pkg:+"$docker_pkg"} debootstrap
  start_docker
  make_venv .venv python3
  # sparkfleet run: bench.yml through ansible-runner, live progress, then the report (in-process).
  say "sparkfleet run $*"
  exec .venv/bin/sparkfleet run "$@"
fi

# ---- test ----------------------------------------------------------------------------------------
docker_pkg=$(docker_to_install)
apt_install "${base_pkgs[@]}" ${docker_pkg:+"$docker_pkg"} openssh-server openssh-client openmpi-bin debootstrap iproute2 iputils-ping \
  iptables chromium fonts-dejavu-core cmake g++
start_docker
make_venv .venv python3

status=0
step() { say "$1"; shift; "$@" || { echo "FAILED: $*" >&2; status=1; }; }

step "ruff" .venv/bin/ruff check .
step "ansible-playbook --syntax-check" bash -c \
  'for pb in bench.yml playbooks/*.yml; do .venv/bin/ansible-playbook --syntax-check "$pb" >/dev/null || exit 1; done'
step "ansible-lint (production profile, as configured in .ansible-lint)" .venv/bin/ansible-lint -q
step "ansible-test sanity validate-modules (the checkout, in place)" tests/sanity/run.sh .venv
# The serving e2e's real engine: llama.cpp's llama-server from the llama-cpp-python sdist, built once and cached
# in ~/.cache/sparkfleet (about 10 minutes on 2 cores the first time), before the tests so no test waits on it.
step "llama-server for the serving tests (built once, cached)" .venv/bin/python tests/fleet/llamacpp.py build
# AIPerf for its end-to-end test (tests/integration/test_aiperf_sla.py) at the pin its driver names, in a virtualenv
# of its own: about 1.2 GB of dependencies (pyarrow, transformers, plotly...) the product's venv must not carry.
tool_venv() {
  local dir=$1 requirement=$2
  [ -e "$dir/.installed-$requirement" ] && return 0
  python3 -m venv "$dir" && "$dir/bin/pip" install -q --disable-pip-version-check "$requirement" \
    && touch "$dir/.installed-$requirement"
}
aiperf_pin=$(sed -n 's/^ *PACKAGE, PIN, EXECUTABLE = "aiperf", "\([^"]*\)".*/\1/p' \
  plugins/module_utils/sparkfleet_host/engines/serving_client.py)
step "aiperf $aiperf_pin for the AIPerf end-to-end test (its own venv, installed once)" \
  tool_venv .venv-aiperf "aiperf==$aiperf_pin"
[ "$(id -u)" -eq 0 ] || echo "note: not root: tests marked 'root' (fake fleet, Docker, chroot) are skipped"
ansible_version=$(.venv/bin/python -c 'import ansible.release as r; print(r.__version__)')
workers=${SPARKFLEET_TEST_WORKERS:-3}

# The unit tests run in a copy of the repo alone in an empty directory - what a clone has (tracked files and
# untracked ones git does not ignore), nothing beside it (no ../shared) - and none may skip for missing data.
unit_tests_alone() {
  local tmp status=0
  tmp=$(mktemp -d)
  mkdir -p "$tmp/ansible_collections/$ns/$name"
  git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$tmp/ansible_collections/$ns/$name"
  (cd "$tmp/ansible_collections/$ns/$name" && "$OLDPWD/.venv/bin/python" -m pytest -q \
    -p no:cacheprovider -ra -n "$workers" tests/unit) >"$tmp/log" 2>&1 || status=$?
  tail -n "$([ $status -eq 0 ] && echo 15 || echo 80)" "$tmp/log"
  if grep -iE "SKIPPED.*(not found|missing|shared|data)" "$tmp/log"; then echo "skipped for missing data" >&2; status=1; fi
  rm -rf "$tmp"
  return $status
}

if [ $# -eq 0 ]; then
  step "unit tests (ansible-core $ansible_version), in a copy of the repo alone in an empty directory" unit_tests_alone
  # --dist loadfile: a file's tests share one worker (and its fake fleets); the e2e tests mostly wait.
  step "end-to-end tests (ansible-core $ansible_version)" .venv/bin/pytest -q -ra -n "$workers" --dist loadfile tests/integration
else
  step "pytest $* (ansible-core $ansible_version)" .venv/bin/pytest -q -ra -n "$workers" --dist loadfile "$@"
fi

newest=$(newest_python)
if [ -n "$newest" ]; then
  make_venv .venv-newest "$newest"
  step "unit tests on $("$newest" --version) / ansible-core $(.venv-newest/bin/python -c 'import ansible.release as r; print(r.__version__)')" \
    .venv-newest/bin/pytest -q -n 2 --dist loadfile tests/unit
  # Ansible's own behaviour changes between releases (2.21's register projections broke bench_follow once):
  # the localhost pipeline end to end on the newest ansible-core too.
  if [ "$(id -u)" = 0 ]; then
    step "end-to-end smoke on ansible-core $(.venv-newest/bin/python -c 'import ansible.release as r; print(r.__version__)')" \
      .venv-newest/bin/pytest -q tests/integration/test_bench_local.py
  fi
else
  echo "note: no Python >= 3.12 here; the unit tests ran on $(python3 --version) only"
fi
exit $status
