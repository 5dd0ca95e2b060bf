# Shared set-up for platform/up and platform/test. Sourced, not run.
# Installs what the platform needs on a fresh Debian or Ubuntu machine that has python3,
# then exports the environment that settings.py, supervisord.conf and the tests read.

PLATFORM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PLATFORM_ROOT
export PLATFORM_VAR_DIR="${PLATFORM_VAR_DIR:-$PLATFORM_ROOT/var}"
export VENV="${VENV:-$PLATFORM_ROOT/.venv}"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# System packages: redis-server, the venv module of the Python that builds the virtual
# environment (SYSTEM_PYTHON for a release, see release.sh; python3 on PATH for development),
# and any extra names given as arguments. Debian packages venv per version (python3.11-venv),
# so the name comes from that interpreter, not from whichever python3 is first on PATH.
ensure_system_packages() {
  local missing=() pkg python="${SYSTEM_PYTHON:-python3}" version
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  if ! command -v "$python" >/dev/null 2>&1; then
    missing+=(python3 python3-venv)
  elif ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    missing+=("python$version-venv")
  fi
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing system packages: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
  # An interpreter the packages cannot fix (a build of its own, not the distribution's).
  if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    echo "platform: $python cannot create a virtual environment (no ensurepip/venv module);" \
      "install its venv module (a release uses PLATFORM_PYTHON, default /usr/bin/python3)" >&2
    exit 1
  fi
}

# Drop pip's warnings about package mirrors configured on this machine but absent; keep the
# rest (errors included). pip's own exit status still decides (pipefail).
quiet_pip() { grep -v "is ignored: it is neither a file nor a directory" || true; }

# The locks (adr/0029): platform/lock writes them from requirements.txt, whose sha256 each
# one records on its second line. The oldest Python they are resolved for:
LOCK_PYTHON=3.11
# The compatibility leg "previous" (platform/compat, adr/0032): the previous minor of Celery
# and kombu (Celery 5.7 requires kombu 5.7; 5.6 goes with 5.6), everything else as locked.
COMPAT_PREVIOUS=("celery[redis]==5.6.3" "kombu==5.6.2")
requirements_sha256() { sha256sum "$PLATFORM_ROOT/requirements.txt" | cut -d' ' -f1; }
# Runtime dependencies only: a requirements file's pins down to its "# tests" section.
runtime_requirements_of() { sed '/^# tests/,$d' "$1"; }

# A lock made from another requirements.txt than this one is refused, not half-installed.
lock_check() {
  local lock="$1" recorded
  recorded="$(sed -n '2s/^# requirements.txt sha256 //p' "$lock" 2>/dev/null || true)"
  if [ "$recorded" != "$(requirements_sha256)" ]; then
    echo "platform: $lock was not made from this requirements.txt; run bash platform/lock" \
      "after editing requirements.txt, and commit the locks with it (adr/0029)" >&2
    exit 1
  fi
}

# Install LOCK into the virtual environment PYTHON, every file checked against its hash and
# nothing outside the lock pulled in. A third argument "cached" lets pip reuse its download
# cache (development, tests, the compatibility legs: the hashes still check every file); a
# release's venv is built without it, so a customer box keeps no cache of packages.
pip_install_locked() {
  local python="$1" lock="$2" cache=(--no-cache-dir)
  [ "${3:-}" != cached ] || cache=()
  "$python" -m pip install -q "${cache[@]}" --require-hashes --no-deps -r "$lock" 2>&1 | quiet_pip
}

# The development and test virtual environment, exactly requirements.lock: built again from
# nothing whenever the lock changes, so a package dropped from the lock leaves the venv too.
ensure_venv() {
  local lock="$PLATFORM_ROOT/requirements.lock" stamp="$VENV/.lock.sha256" want
  lock_check "$lock"
  want="$(sha256sum "$lock" | cut -d' ' -f1)"
  if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  if [ -e "$VENV" ]; then
    if [ ! -f "$VENV/pyvenv.cfg" ]; then
      echo "platform: VENV=$VENV exists but is no virtual environment; not touching it" >&2
      exit 1
    fi
    say "requirements.lock changed: rebuilding the virtual environment in $VENV"
    rm -rf "$VENV"
  else
    say "creating virtual environment in $VENV"
  fi
  python3 -m venv "$VENV"
  say "installing the locked Python dependencies (hashes checked)"
  pip_install_locked "$VENV/bin/python" "$lock" cached
  echo "$want" > "$stamp"
}

random_secret() { "$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(24))'; }

# Files of values (dev.env, platform.env, /etc/platform/platform.env, a --join copy) have one
# format and one reader and writer, apps/ops/envfile.py, run by path (standard library only):
# never sourced, so nothing a value holds is ever run (adr/0037).
ENVFILE_TOOL="$PLATFORM_ROOT/apps/ops/envfile.py"

# Export FILE's values (only the KEYs named, if any) into this shell, as data: each pair
# arrives NUL-separated and `export "$pair"` assigns it literally. --keep: a variable already
# set and non-empty wins over the file.
env_file_export() {
  local file="$1" keep=no pairs pair name
  shift
  if [ "${1:-}" = --keep ]; then keep=yes; shift; fi
  pairs="$(mktemp)"
  if ! "${SYSTEM_PYTHON:-python3}" "$ENVFILE_TOOL" export "$file" "$@" > "$pairs"; then
    rm -f "$pairs"
    exit 1
  fi
  while IFS= read -r -d '' pair; do
    name="${pair%%=*}"
    if [ "$keep" = yes ] && [ -n "${!name:-}" ]; then continue; fi
    export "$pair"
  done < "$pairs"
  rm -f "$pairs"
}

# Write to stdout a file of the named variables of this shell's environment (exported ones;
# unset ones left out), in the one format; a value with a line break or NUL is refused, the
# key named. --header LINE: a comment line at the top.
env_file_render() { "${SYSTEM_PYTHON:-python3}" "$ENVFILE_TOOL" render "$@"; }

# Percent-encode a value for the user-information part of a URL (a password with @ / : #).
url_quote() {
  V="$1" "${SYSTEM_PYTHON:-python3}" -c \
    'import os, urllib.parse; print(urllib.parse.quote(os.environ["V"], safe=""))'
}

# A value as one argument of a Redis configuration line (sdssplitargs' double quotes): a
# password with spaces, quotes or backslashes stays one word and never a second directive.
redis_conf_quote() {
  local v="$1" bs='\' dq='"'
  v="${v//"$bs"/"$bs$bs"}"; v="${v//"$dq"/"$bs$dq"}"
  printf '"%s"' "$v"
}

# A host for a URL: an IPv6 address in brackets.
url_host_of() { case "$1" in *:*) echo "[$1]" ;; *) echo "$1" ;; esac; }

# Development secrets, generated once into var/dev.env (mode 600) and reused on every start.
ensure_dev_env() {
  mkdir -p "$PLATFORM_VAR_DIR/log" "$PLATFORM_VAR_DIR/redis" "$PLATFORM_VAR_DIR/mail"
  local env_file="$PLATFORM_VAR_DIR/dev.env"
  if [ ! -f "$env_file" ]; then
    (umask 077
     export DJANGO_SECRET_KEY="$(random_secret)" REDIS_PASSWORD="$(random_secret)" \
       FLOWER_USER=admin FLOWER_PASSWORD="$(random_secret)" DEV_USER=dev \
       DEV_USER_PASSWORD="$(random_secret)"
     env_file_render DJANGO_SECRET_KEY REDIS_PASSWORD FLOWER_USER FLOWER_PASSWORD DEV_USER \
       DEV_USER_PASSWORD > "$env_file.new"
     mv -f "$env_file.new" "$env_file")
  fi
  env_file_export "$env_file"
  export REDIS_PORT="${REDIS_PORT:-6390}"
  export WEB_PORT="${WEB_PORT:-8000}"
  export FLOWER_PORT="${FLOWER_PORT:-5555}"
  export WEB_WORKERS="${WEB_WORKERS:-2}"
  export CELERY_WORKERS="${CELERY_WORKERS:-2}"
  export CELERY_CONCURRENCY="${CELERY_CONCURRENCY:-2}"
  export FLOWER_BASIC_AUTH="${FLOWER_USER}:${FLOWER_PASSWORD}"
  export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-config.settings.development}"
  export_roles
  export PLATFORM_HOST_NAME="${PLATFORM_HOST_NAME:-$(hostname)}"
  # Addresses this host listens on: loopback unless told otherwise (several hosts: README).
  export WEB_HOST="${WEB_HOST:-127.0.0.1}"
  export REDIS_BIND="${REDIS_BIND:-127.0.0.1}"
  data_bind_check "$PLATFORM_ROLES" "$REDIS_BIND" REDIS_BIND
  if has_role data; then
    # This host runs Redis: its own, on the first address it binds (the password is ours).
    REDIS_URL="$(redis_scheme)://:$(url_quote "$REDIS_PASSWORD")@$(url_host_of "${REDIS_BIND%% *}"):${REDIS_PORT}/0"
    export REDIS_URL
  elif [ -z "${REDIS_URL:-}" ] || [ -z "${DATABASE_URL:-}" ]; then
    echo "platform: PLATFORM_ROLES=$PLATFORM_ROLES has no 'data': set REDIS_URL and" \
      "DATABASE_URL to the data host's Redis and PostgreSQL (README, 'Several hosts')" >&2
    exit 1
  fi
  write_platform_env
}

# PLATFORM_ROLES (default: all) decides which programs start here; START_<ROLE> feeds
# supervisord's autostart= (platform/supervisord.conf). Settings validate the names again.
ALL_ROLES="web workers beat flower data"
# `sentinel`: the third sentinel of a production Sentinel group, on an app host
# (platform-sentinel.service); not in the default. Development's group (PLATFORM_REDIS=sentinel)
# runs all three sentinels with `data`.
KNOWN_ROLES="$ALL_ROLES sentinel"
export_roles() {
  export PLATFORM_ROLES="${PLATFORM_ROLES:-${ALL_ROLES// /,}}"
  local role
  for role in ${PLATFORM_ROLES//,/ }; do
    case " $KNOWN_ROLES " in
      *" $role "*) ;;
      *) echo "platform: PLATFORM_ROLES names unknown role '$role' (choose from $KNOWN_ROLES)" >&2
         exit 1 ;;
    esac
  done
  for role in $KNOWN_ROLES; do
    if has_role "$role"; then
      export "START_${role^^}=true"
    else
      export "START_${role^^}=false"
    fi
  done
}

has_role() { case ",$PLATFORM_ROLES," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# The addresses a data host's Redis or PostgreSQL listens on ($name: REDIS_BIND, POSTGRES_BIND).
# The any-address (0.0.0.0, ::, *) would also serve every other network this host is on (a
# public interface, a management network): refused unless the operator says so with
# ${name}_ANY=yes. A host whose only role is data serves other hosts alone: bound to loopback
# only it would refuse every one of them. Both refused here, not found later by each app host.
data_bind_check() {
  local roles="$1" bind="$2" name="$3" any="${3}_ANY" address loopback_only=yes addresses
  case ",$roles," in *,data,*) ;; *) return 0 ;; esac
  read -ra addresses <<< "$bind"  # split on blanks, no glob ('*' is an address here)
  for address in "${addresses[@]}"; do
    case "$address" in
      0.0.0.0|::|'[::]'|'*')
        if [ "${!any:-no}" != yes ]; then
          echo "platform: $name=$bind listens on every network of this host: give this" \
            "host's address on the app hosts' network, or set $any=yes if that is meant" \
            "(README, 'Several hosts')" >&2
          exit 1
        fi
        loopback_only=no ;;
      127.0.0.1|::1|localhost) ;;
      *) loopback_only=no ;;
    esac
  done
  [ "$loopback_only" = yes ] || return 0
  case ",$roles," in *,web,*|*,workers,*|*,beat,*|*,flower,*) return 0 ;; esac
  echo "platform: PLATFORM_ROLES=$roles serves other hosts, but $name=$bind is loopback only:" \
    "set it to this host's address on their network (README, 'Several hosts')" >&2
  exit 1
}

# PostgreSQL instead of SQLite, when PLATFORM_DATABASE=postgres: the project's own cluster in
# var/postgres (platform/postgres: an unprivileged user, passwords only, loopback), its
# password generated once into var/postgres.password, DATABASE_URL pointing at it. The
# application's role "platform" owns database platform and is no superuser; the cluster's
# superuser platform_admin has its own password (var/postgres.admin-password), used only by
# platform/postgres (adr/0024).
ensure_postgres() {
  [ "${PLATFORM_DATABASE:-sqlite}" = postgres ] || return 0
  # Only on the data host (PLATFORM_ROLES, default all); others use its DATABASE_URL.
  case ",${PLATFORM_ROLES:-data}," in *,data,*) ;; *) return 0 ;; esac
  # The address it listens on: loopback unless told (several hosts: README).
  local bind="${POSTGRES_BIND:-127.0.0.1}"
  data_bind_check "${PLATFORM_ROLES:-data,web}" "$bind" POSTGRES_BIND
  ensure_system_packages postgresql
  local dir="$PLATFORM_VAR_DIR/postgres" pwfile="$PLATFORM_VAR_DIR/postgres.password"
  mkdir -p "$PLATFORM_VAR_DIR"
  export POSTGRES_PORT="${POSTGRES_PORT:-5433}"
  local adminfile="$PLATFORM_VAR_DIR/postgres.admin-password"
  if [ -f "$dir/data/PG_VERSION" ] && [ ! -f "$adminfile" ]; then
    # Created before ADR 28: there the application's role is the bootstrap superuser, which
    # PostgreSQL cannot demote. Refused rather than run the application as superuser.
    echo "platform: $dir was created with the application's role as its superuser (before" \
      "ADR 28); dump what you need, move $dir aside and run again for a new cluster" >&2
    exit 1
  fi
  if [ ! -f "$pwfile" ]; then (umask 077; random_secret > "$pwfile"); fi
  if [ ! -f "$adminfile" ]; then (umask 077; random_secret > "$adminfile"); fi
  POSTGRES_PASSWORD="$(cat "$pwfile")"
  POSTGRES_ADMIN_PASSWORD="$(cat "$adminfile")"
  export POSTGRES_PASSWORD POSTGRES_ADMIN_PASSWORD POSTGRES_DB=platform
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    say "creating the PostgreSQL cluster in $dir"
    "$PLATFORM_ROOT/platform/postgres" init "$dir"
  fi
  if ! "$PLATFORM_ROOT/platform/postgres" status "$dir" >/dev/null 2>&1; then
    say "starting PostgreSQL on $bind:$POSTGRES_PORT"
    "$PLATFORM_ROOT/platform/postgres" start "$dir" "$bind" "$POSTGRES_PORT"
  fi
  export DATABASE_URL="postgres://platform:${POSTGRES_PASSWORD}@${bind}:${POSTGRES_PORT}/platform"
}

stop_postgres() {
  [ "${PLATFORM_DATABASE:-sqlite}" = postgres ] || return 0
  case ",${PLATFORM_ROLES:-data}," in *,data,*) ;; *) return 0 ;; esac
  "$PLATFORM_ROOT/platform/postgres" stop "$PLATFORM_VAR_DIR/postgres" || true
}

# var/platform.env: the environment of the running platform, rewritten at every start, so that
# a bare `.venv/bin/python manage.py ...` reaches it (manage.py reads it: apps/ops/envfile.py).
write_platform_env() {
  local keys=(DJANGO_SETTINGS_MODULE DJANGO_SECRET_KEY PLATFORM_VAR_DIR PLATFORM_ROLES
    PLATFORM_HOST_NAME REDIS_URL FLOWER_BASIC_AUTH)
  [ -z "${DATABASE_URL:-}" ] || keys+=(DATABASE_URL)
  [ -z "${REDIS_TLS_CA_FILE:-}" ] || keys+=(REDIS_TLS_CA_FILE)
  # Where this start listens and which interpreter it runs: what a second platform/up prints
  # (apps/ops/up_state.py), whatever its own shell sets.
  keys+=(WEB_HOST WEB_PORT FLOWER_PORT VENV)
  # Redis through sentinels (settings: REDIS_SENTINELS wins over REDIS_URL), when given.
  if [ -n "${REDIS_SENTINELS:-}" ]; then
    export REDIS_PASSWORD="${REDIS_PASSWORD:-}" REDIS_SENTINEL_PASSWORD="${REDIS_SENTINEL_PASSWORD:-}"
    keys+=(REDIS_SENTINELS REDIS_PASSWORD REDIS_SENTINEL_PASSWORD)
    [ -z "${REDIS_SENTINEL_MASTER:-}" ] || keys+=(REDIS_SENTINEL_MASTER)
    [ -z "${REDIS_TLS:-}" ] || keys+=(REDIS_TLS)
  fi
  (umask 077
   export "${keys[@]}"
   env_file_render "${keys[@]}" \
     --header "Written by platform/up at every start; manage.py reads it. Secrets: keep it private." \
     > "$PLATFORM_VAR_DIR/platform.env.new"
   mv -f "$PLATFORM_VAR_DIR/platform.env.new" "$PLATFORM_VAR_DIR/platform.env")
}

# redis.conf for this machine: the shared platform/redis.conf plus port, directory, password.
write_redis_conf() {
  umask 077
  cat > "$PLATFORM_VAR_DIR/redis.conf" <<CONF
include $PLATFORM_ROOT/platform/redis.conf
port $REDIS_PORT
dir $PLATFORM_VAR_DIR/redis
requirepass $(redis_conf_quote "$REDIS_PASSWORD")
bind $REDIS_BIND
$(redis_tls_lines)
CONF
  umask 022
}

# TLS for the data host's Redis (adr/0026): with REDIS_TLS_CERT and REDIS_TLS_KEY (made by
# platform/certs server) Redis speaks TLS only on its port (the plain port closed), and every
# client verifies REDIS_TLS_CA_FILE. Clients authenticate with the password, not certificates.
# A replica reaches its primary over TLS too (tls-replication), as a sentinel reaches them all.
# The port is the first argument (default REDIS_PORT): a sentinel's lines name its own.
redis_tls_lines() {
  [ -n "${REDIS_TLS_CERT:-}" ] || return 0
  : "${REDIS_TLS_KEY:?platform: REDIS_TLS_CERT needs REDIS_TLS_KEY}"
  : "${REDIS_TLS_CA_FILE:?platform: REDIS_TLS_CERT needs REDIS_TLS_CA_FILE (platform/certs ca)}"
  cat <<CONF
port 0
tls-port ${1:-$REDIS_PORT}
tls-cert-file $REDIS_TLS_CERT
tls-key-file $REDIS_TLS_KEY
tls-ca-cert-file $REDIS_TLS_CA_FILE
tls-auth-clients no
tls-replication yes
CONF
}

redis_scheme() { if [ -n "${REDIS_TLS_CERT:-}" ]; then echo rediss; else echo redis; fi; }
