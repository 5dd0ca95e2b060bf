# Shared by platform/install, platform/upgrade and platform/rollback. Sourced after lib.sh.
# The production layout, under an optional prefix (tests install into a temporary root):
#   /opt/platform/releases/<version>/   the code and its own venv/, read-only to the user
#   /opt/platform/current               symlink to the running release
#   /etc/platform/platform.env          secrets and settings (root:platform 0640)
#   /etc/platform/redis.conf, tls/      Redis's generated config, the TLS pair
#   /var/lib/platform/                  database, redis/, backups/, static/ (the user's)
#   /etc/systemd/system/platform*.{target,service}

release_layout() {
  local prefix="$1"
  PLATFORM_USER="${PLATFORM_USER:-platform}"
  APP_DIR="$prefix/opt/platform"
  ETC_DIR="$prefix/etc/platform"
  DATA_DIR="$prefix/var/lib/platform"
  UNIT_DIR="$prefix/etc/systemd/system"
  ENV_FILE="$ETC_DIR/platform.env"
  MANAGE_WRAPPER="$prefix/usr/local/bin/platform-manage"
  SYSTEM_PYTHON="${PLATFORM_PYTHON:-/usr/bin/python3}"
}

# The release's name: a hash of the shipped files, so the same code always lands in the same
# directory (installing twice changes nothing) and different code never overwrites it.
release_version() {
  local hash
  hash="$(release_tar "$PLATFORM_ROOT" | sha256sum | cut -c1-12)"
  echo "r-$hash"
}

# What a checkout holds besides its code is left out, .gitignore's entries among them: tools
# write there while a checkout is in use (Hypothesis's example database, written by the fuzz
# tests while another test installed twice, gave the second install another name).
release_tar() {
  tar -C "$1" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
    --exclude=./.venv --exclude='./.venv-compat-*' --exclude=./var --exclude=./.git \
    --exclude='__pycache__' --exclude='*.pyc' --exclude=./.pytest_cache --exclude=./.ruff_cache \
    --exclude=./.hypothesis --exclude=./staticfiles --exclude=./loadtests/results -cf - .
}


# Build releases/<version> with its own virtual environment; a directory without the
# .complete marker is a build that was interrupted and is built again.
release_build() {
  local version="$1" dir="$APP_DIR/releases/$1"
  if [ -f "$dir/.complete" ]; then
    say "release $version already built"
    return
  fi
  lock_check "$PLATFORM_ROOT/requirements-runtime.lock"
  say "building release $version in $dir"
  rm -rf "$dir"
  install -d -m 755 "$dir"
  release_tar "$PLATFORM_ROOT" | tar -C "$dir" -xf - --no-same-owner
  # The system's Python, which every user can run (not a developer's own build under /root).
  if same_pins_as_current; then
    # The same pins as the running release, which pip installed and checked.
    venv_clone "$(cd "$APP_DIR/current" && pwd -P)/venv" "$dir/venv"
  else
    "$SYSTEM_PYTHON" -m venv "$dir/venv"
    pip_install_locked "$dir/venv/bin/python" "$dir/requirements-runtime.lock"
  fi
  chmod -R go-w "$dir"
  echo "$version" > "$dir/.complete"
}

same_pins_as_current() {
  [ -f "$APP_DIR/current/.complete" ] && [ -f "$APP_DIR/current/requirements-runtime.lock" ] \
    && cmp -s "$PLATFORM_ROOT/requirements-runtime.lock" \
      "$APP_DIR/current/requirements-runtime.lock"
}

# Same pins as the running release: copy its packages instead of installing them again (an
# upgrade that changes only code then takes seconds). A venv records its own path in its
# scripts, so the copies are rewritten to the new one.
venv_clone() {
  local src="$1" dest="$2" script
  "$SYSTEM_PYTHON" -m venv --without-pip "$dest"
  # Hard links: pip replaces files rather than writing into them, so the releases never
  # change each other's packages.
  cp -al "$src/lib/." "$dest/lib/"
  for script in "$src"/bin/*; do
    [ -e "$dest/bin/$(basename "$script")" ] && continue
    if head -c 2 "$script" | grep -q '#!' || grep -qI "$src" "$script" 2>/dev/null; then
      sed "s|$src|$dest|g" "$script" > "$dest/bin/$(basename "$script")"
      chmod 755 "$dest/bin/$(basename "$script")"
    fi
  done
}

# Copy SRC to DEST only if it differs (so a second install leaves every file untouched).
install_if_changed() {
  local src="$1" dest="$2" mode="$3" owner="$4" group="$5"
  if [ -f "$dest" ] && cmp -s "$src" "$dest"; then
    chmod "$mode" "$dest"; chown "$owner:$group" "$dest"
    return
  fi
  install -m "$mode" -o "$owner" -g "$group" "$src" "$dest"
}

secret() { "$SYSTEM_PYTHON" -c 'import secrets, sys; print(secrets.token_urlsafe(int(sys.argv[1])))' "$1"; }

# The values an app host takes from the data host's platform.env (platform/install --join):
# the shared secret key, the database, Redis by URL or by Sentinel, and the server's major
# version for the PostgreSQL client. The rest of that file (its roles, binds, Flower's
# password) belongs to the data host and is ignored.
JOIN_KEYS=(DJANGO_SECRET_KEY DATABASE_URL REDIS_URL REDIS_SENTINELS REDIS_SENTINEL_MASTER
  REDIS_PASSWORD REDIS_SENTINEL_PASSWORD REDIS_TLS REDIS_TLS_CA_FILE POSTGRES_MAJOR)

# Read the join file as data (NAME=value lines, comments, blank lines), never as a script:
# nothing in it runs, and no value is printed. A value already in the environment wins (e.g.
# REDIS_TLS_CA_FILE, a path on this host). A file other users may read is refused: it holds
# the data host's secrets.
join_file_read() {
  local file="$1"
  if [ ! -f "$file" ] || [ ! -r "$file" ]; then
    echo "platform/install: --join $file: no such readable file (copy the data host's" \
      "/etc/platform/platform.env)" >&2
    exit 1
  fi
  if [ -n "$(find "$file" -maxdepth 0 -perm /o+rwx)" ]; then
    echo "platform/install: --join $file is open to every user of this machine and holds" \
      "the data host's secrets: chmod 600 it" >&2
    exit 1
  fi
  # The one parser (apps/ops/envfile.py): the shared keys only, as data.
  env_file_export "$file" --keep "${JOIN_KEYS[@]}"
}

# The host part of a URL (scheme://user:password@host:port/...), for the checks below.
url_host() {
  local rest="${1#*://}"
  rest="${rest##*@}"; rest="${rest%%/*}"; rest="${rest%%\?*}"
  case "$rest" in \[*) rest="${rest%%]*}"; echo "${rest#[}" ;; *) echo "${rest%:*}" ;; esac
}

# A host without the data role joins the data host: the shared values come from the first
# host's platform.env (--join FILE, or the environment). One secret key for every web host: a
# session or CSRF token signed on one must verify on the others. Redis by REDIS_URL or by
# Sentinel (REDIS_SENTINELS with both passwords). Checked before anything is built or written;
# messages name the setting, never its value.
join_values_check() {
  local roles="${PLATFORM_ROLES:-web,workers,beat,flower,data}" redis=url host
  roles_include "$roles" data && return 0
  [ -n "${REDIS_URL:-}" ] || redis=""
  if [ -z "$redis" ] && [ -n "${REDIS_SENTINELS:-}" ] && [ -n "${REDIS_PASSWORD:-}" ] \
      && [ -n "${REDIS_SENTINEL_PASSWORD:-}" ]; then
    redis=sentinel
  fi
  if [ -z "${DJANGO_SECRET_KEY:-}" ] || [ -z "$redis" ] || [ -z "${DATABASE_URL:-}" ]; then
    echo "platform/install: PLATFORM_ROLES=$roles has no 'data': give DJANGO_SECRET_KEY," \
      "REDIS_URL and DATABASE_URL from the data host (or REDIS_SENTINELS, REDIS_PASSWORD and" \
      "REDIS_SENTINEL_PASSWORD instead of REDIS_URL): platform/install --join FILE with a" \
      "copy of its /etc/platform/platform.env (README, 'Several hosts')" >&2
    exit 1
  fi
  case "$DATABASE_URL" in
    postgres://*|postgresql://*) ;;
    *) echo "platform/install: DATABASE_URL must be the data host's PostgreSQL" \
         "(postgres://...): a SQLite file cannot be shared between hosts" >&2; exit 1 ;;
  esac
  if [ "$redis" = url ]; then
    case "$REDIS_URL" in
      redis://*|rediss://*) ;;
      *) echo "platform/install: REDIS_URL must be redis:// or rediss://" >&2; exit 1 ;;
    esac
  fi
  for name in DATABASE_URL ${REDIS_URL:+REDIS_URL}; do
    host="$(url_host "${!name}")"
    case "$host" in
      ''|localhost|127.0.0.1|::1|0.0.0.0|::|%2F*|/*)
        echo "platform/install: $name names this machine, not the data host: use the data" \
          "host's address (its REDIS_BIND / POSTGRES_BIND)" >&2
        exit 1 ;;
    esac
  done
  # Production settings require verified TLS on a host without data unless told otherwise
  # (config/settings/production.py): refused here, before anything is written, not at the
  # first migrate.
  case "${PLATFORM_REQUIRE_TLS:-true}" in
    0|false|False|FALSE|no|off) ;;
    *)
      local redis_tls=no
      case "${REDIS_URL:-}" in rediss://*) redis_tls=yes ;; esac
      case "${REDIS_TLS:-}" in 1|true|True|TRUE|yes|on) [ "$redis" = sentinel ] && redis_tls=yes ;; esac
      if [ "$redis_tls" = no ] || [ -z "${REDIS_TLS_CA_FILE:-}" ]; then
        echo "platform/install: a host without 'data' reaches Redis over TLS by default: give" \
          "rediss:// (or REDIS_TLS=true with sentinels) and REDIS_TLS_CA_FILE, or set" \
          "PLATFORM_REQUIRE_TLS=false if the network between hosts is trusted (README," \
          "'TLS between hosts')" >&2
        exit 1
      fi
      case "$DATABASE_URL" in
        *sslmode=verify-full*|*sslmode=verify-ca*) ;;
        *) echo "platform/install: a host without 'data' reaches PostgreSQL over TLS by" \
             "default: DATABASE_URL needs ?sslmode=verify-full&sslrootcert=..., or set" \
             "PLATFORM_REQUIRE_TLS=false if the network between hosts is trusted" >&2
           exit 1 ;;
      esac ;;
  esac
  if [ -n "${REDIS_TLS_CA_FILE:-}" ] && [ ! -f "$REDIS_TLS_CA_FILE" ]; then
    echo "platform/install: REDIS_TLS_CA_FILE is not a file on this host: copy the private" \
      "CA here and give its path (REDIS_TLS_CA_FILE=... before --join)" >&2
    exit 1
  fi
}

# Generated once; a second install keeps every value (and the secrets with it). Written by
# apps/ops/envfile.py in systemd's EnvironmentFile= format and read back by it (never sourced):
# every value is data, whatever it holds (adr/0037). Everything the installer was told is
# written here, so upgrade, rollback and a second install render the same configuration.
ensure_env_file() {
  local host="$1"
  if [ ! -f "$ENV_FILE" ]; then
    join_values_check
    local roles="${PLATFORM_ROLES:-web,workers,beat,flower,data}"
    local bind="${REDIS_BIND:-127.0.0.1}"
    data_bind_check "$roles" "$bind" REDIS_BIND
    redis_replica_check
    numbers_check
    local tmp
    tmp="$(mktemp)"
    (
      export DJANGO_SETTINGS_MODULE=config.settings.production PLATFORM_VAR_DIR="$DATA_DIR" \
        PLATFORM_ROLES="$roles" REDIS_BIND="$bind" REDIS_PORT="${REDIS_PORT:-6390}" \
        WEB_PORT="${WEB_PORT:-443}" WEB_HOST="${WEB_HOST:-0.0.0.0}" \
        WEB_WORKERS="${WEB_WORKERS:-2}" CELERY_CONCURRENCY="${CELERY_CONCURRENCY:-2}" \
        FLOWER_PORT="${FLOWER_PORT:-5555}" FLOWER_BASIC_AUTH="admin:$(secret 24)" \
        DATABASE_URL="${DATABASE_URL:-sqlite:///$DATA_DIR/db.sqlite3}" \
        DJANGO_ALLOWED_HOSTS="$host,localhost,127.0.0.1"
      export REDIS_PASSWORD="${REDIS_PASSWORD:-$(secret 24)}"
      [ -n "${DJANGO_SECRET_KEY:-}" ] || export DJANGO_SECRET_KEY="$(secret 48)"
      local origin="https://$host" keys
      [ "$WEB_PORT" = 443 ] || origin="$origin:$WEB_PORT"
      export DJANGO_CSRF_TRUSTED_ORIGINS="$origin"
      install_redis_tls
      keys=(DJANGO_SETTINGS_MODULE DJANGO_SECRET_KEY DJANGO_ALLOWED_HOSTS
        DJANGO_CSRF_TRUSTED_ORIGINS DATABASE_URL PLATFORM_VAR_DIR PLATFORM_ROLES
        PLATFORM_REQUIRE_TLS REDIS_PASSWORD REDIS_PORT REDIS_BIND)
      if [ -z "${REDIS_URL:-}" ] && [ -n "${REDIS_SENTINELS:-}" ]; then
        # Redis through the data hosts' sentinels (settings: REDIS_SENTINELS wins over a URL).
        export REDIS_SENTINEL_PASSWORD="${REDIS_SENTINEL_PASSWORD:-}"
        keys+=(REDIS_SENTINELS REDIS_SENTINEL_PASSWORD REDIS_SENTINEL_MASTER REDIS_TLS)
      else
        [ -n "${REDIS_URL:-}" ] || REDIS_URL="$(redis_scheme)://:$(url_quote "$REDIS_PASSWORD")@$(url_host_of "${bind%% *}"):$REDIS_PORT/0"
        export REDIS_URL
        keys+=(REDIS_URL)
      fi
      # Sentinel and replica settings (platform/install's environment): without them an
      # upgrade would write a replica's redis.conf without replicaof.
      keys+=(REDIS_TLS_CA_FILE REDIS_TLS_CERT REDIS_TLS_KEY REDIS_REPLICA_OF SENTINEL_PORT
        SENTINEL_BIND REDIS_SENTINEL_PRIMARY POSTGRES_MAJOR FLOWER_PORT FLOWER_BASIC_AUTH
        WEB_HOST WEB_PORT WEB_WORKERS CELERY_CONCURRENCY)
      env_file_render "${keys[@]}" \
        --header "Written once by platform/install; every process of the platform reads it (systemd's" \
        --header "EnvironmentFile=, platform-manage) with apps/ops/envfile.py. Secrets: root and $PLATFORM_USER only." \
        > "$tmp"
    ) || { rm -f "$tmp"; exit 1; }
    install -m 640 -o root -g "$PLATFORM_USER" "$tmp" "$ENV_FILE"
    rm -f "$tmp"
  fi
  chmod 640 "$ENV_FILE"; chown "root:$PLATFORM_USER" "$ENV_FILE"
  env_file_load_installed
}

# Ports and counts are numbers: refused before anything is written, naming the setting.
numbers_check() {
  local name
  for name in REDIS_PORT WEB_PORT FLOWER_PORT WEB_WORKERS CELERY_CONCURRENCY SENTINEL_PORT; do
    if [ -n "${!name:-}" ] && ! [[ "${!name}" =~ ^[0-9]{1,5}$ ]]; then
      echo "platform/install: $name must be a number" >&2
      exit 1
    fi
  done
}

# The installed environment file's values into this shell, as data (install, upgrade,
# rollback): the file wins over the environment, as it did when it was first written.
env_file_load_installed() {
  env_file_export "$ENV_FILE"
}

# Backups on PostgreSQL run pg_dump and pg_restore of the server's major version
# (apps/ops/backups.py: /usr/lib/postgresql/<major>/bin), so every host whose DATABASE_URL is
# PostgreSQL gets postgresql-client-<major>. The major: POSTGRES_MAJOR when given (the join
# file, or the environment: a server not reachable at install time), else asked of the
# server with the release's psycopg (the URL stays in the environment, off the command line).
ensure_postgres_client() {
  local python="$1" major="${POSTGRES_MAJOR:-}"
  case "${DATABASE_URL:-}" in postgres://*|postgresql://*) ;; *) return 0 ;; esac
  if [ -z "$major" ]; then
    if ! major="$("$python" -c 'import os, psycopg
with psycopg.connect(os.environ["DATABASE_URL"], connect_timeout=10) as conn:
    print(conn.info.server_version // 10000)' 2>/dev/null)"; then
      echo "platform/install: cannot reach the PostgreSQL server of DATABASE_URL to learn its" \
        "major version (for postgresql-client-<major>, which backups need): start it, or" \
        "give POSTGRES_MAJOR=<major>" >&2
      exit 1
    fi
  fi
  if [[ ! "$major" =~ ^[0-9]+$ ]]; then
    echo "platform/install: POSTGRES_MAJOR must be a number such as 15" >&2
    exit 1
  fi
  if ! dpkg -s "postgresql-client-$major" >/dev/null 2>&1 \
      && ! apt-cache show "postgresql-client-$major" >/dev/null 2>&1; then
    # A fresh machine may have no package lists yet.
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  fi
  if ! dpkg -s "postgresql-client-$major" >/dev/null 2>&1 \
      && ! apt-cache show "postgresql-client-$major" >/dev/null 2>&1; then
    echo "platform/install: the server is PostgreSQL $major but this system's package lists" \
      "have no postgresql-client-$major (add the PostgreSQL project's apt repository," \
      "apt.postgresql.org, then run this again)" >&2
    exit 1
  fi
  say "PostgreSQL $major client (backups)"
  ensure_system_packages "postgresql-client-$major"
}

# TLS between hosts (adr/0026), given at the first install: REDIS_TLS_CA_FILE (every host: the
# private CA its clients verify) and, on the data host, REDIS_TLS_CERT and REDIS_TLS_KEY (its
# pair, platform/certs). Copied where the platform's user reads them; the variables then name
# the copies (written into the environment file).
install_redis_tls() {
  local tls="$ETC_DIR/tls"
  if [ -n "${REDIS_TLS_CA_FILE:-}" ]; then
    install_if_changed "$REDIS_TLS_CA_FILE" "$tls/ca.pem" 644 root "$PLATFORM_USER"
    export REDIS_TLS_CA_FILE="$tls/ca.pem"
  fi
  if [ -n "${REDIS_TLS_CERT:-}" ]; then
    : "${REDIS_TLS_KEY:?platform/install: REDIS_TLS_CERT needs REDIS_TLS_KEY}"
    : "${REDIS_TLS_CA_FILE:?platform/install: REDIS_TLS_CERT needs REDIS_TLS_CA_FILE}"
    install_if_changed "$REDIS_TLS_CERT" "$tls/redis-server.pem" 644 root "$PLATFORM_USER"
    install_if_changed "$REDIS_TLS_KEY" "$tls/redis-server.key" 640 root "$PLATFORM_USER"
    export REDIS_TLS_CERT="$tls/redis-server.pem" REDIS_TLS_KEY="$tls/redis-server.key"
  fi
}

# The certificate given, or a self-signed one generated once (ten years, the box's name).
ensure_tls() {
  local host="$1" cert="$2" key="$3"
  if [ -n "$cert" ]; then
    install_if_changed "$cert" "$ETC_DIR/tls/cert.pem" 644 root "$PLATFORM_USER"
    install_if_changed "$key" "$ETC_DIR/tls/key.pem" 640 root "$PLATFORM_USER"
  elif [ ! -f "$ETC_DIR/tls/cert.pem" ]; then
    say "generating a self-signed certificate for $host"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$host" \
      -addext "subjectAltName=DNS:$host,DNS:localhost,IP:127.0.0.1" \
      -keyout "$ETC_DIR/tls/key.pem" -out "$ETC_DIR/tls/cert.pem" 2>/dev/null
    chown "root:$PLATFORM_USER" "$ETC_DIR/tls/key.pem" "$ETC_DIR/tls/cert.pem"
    chmod 640 "$ETC_DIR/tls/key.pem"; chmod 644 "$ETC_DIR/tls/cert.pem"
  fi
}

write_redis_conf_for() {
  local tmp
  redis_replica_check
  tmp="$(mktemp)"
  cat > "$tmp" <<CONF
# Written by platform/install: the release's platform/redis.conf plus this box's values.
include $APP_DIR/current/platform/redis.conf
port $REDIS_PORT
dir $DATA_DIR/redis
requirepass $(redis_conf_quote "$REDIS_PASSWORD")
bind ${REDIS_BIND:-127.0.0.1}
$(redis_tls_lines)
$(redis_replica_lines)
CONF
  install_if_changed "$tmp" "$1" 640 root "$PLATFORM_USER"
  rm -f "$tmp"
}

# Under Sentinel (REDIS_SENTINELS set, or REDIS_REPLICA_OF): every node authenticates to its
# primary with the data password (a demoted primary too), and the second data host starts as
# a replica of REDIS_REPLICA_OF ("<primary address> <port>"). After that the sentinels decide
# who follows whom; they tell each node at run time.
redis_replica_lines() {
  [ -n "${REDIS_SENTINELS:-}${REDIS_REPLICA_OF:-}" ] || return 0
  echo "masterauth $(redis_conf_quote "$REDIS_PASSWORD")"
  # The address the sentinels and clients reach it on: without it the primary reports the
  # replica by the source address of its connection, which on a host with several addresses
  # (or behind NAT) is not the one it listens on.
  local bind="${REDIS_BIND:-127.0.0.1}"
  echo "replica-announce-ip ${bind%% *}"
  [ -z "${REDIS_REPLICA_OF:-}" ] || echo "replicaof $REDIS_REPLICA_OF"
}

# Checked before the file is written (an exit inside the $(...) above would not stop it).
redis_replica_check() {
  [ -n "${REDIS_REPLICA_OF:-}" ] || return 0
  if ! [[ "$REDIS_REPLICA_OF" =~ ^[^[:space:]]+\ [0-9]+$ ]]; then
    echo "platform: REDIS_REPLICA_OF must be '<primary address> <port>', got '$REDIS_REPLICA_OF'" >&2
    exit 1
  fi
}

# Does this host run a sentinel? The `sentinel` role (the third, app host), or `data` under
# Sentinel: two data hosts and one app host make the three (adr/0025).
runs_sentinel() {
  local roles="${PLATFORM_ROLES:-web,workers,beat,flower,data}"
  roles_include "$roles" sentinel && return 0
  roles_include "$roles" data && [ -n "${REDIS_SENTINELS:-}${REDIS_REPLICA_OF:-}" ]
}

# The sentinel's file, from the release's platform/sentinel.conf, written once: Sentinel owns
# it afterwards (it records the current primary, the replicas, the other sentinels), so an
# upgrade must not put back the first primary. SENTINEL_PORT (default 26379) and SENTINEL_BIND
# (default REDIS_BIND) say where it listens; the first primary is REDIS_REPLICA_OF on a replica,
# REDIS_SENTINEL_PRIMARY ("<address> <port>") on an app host, else this data host's own Redis.
write_sentinel_conf_for() {
  local file="$1" dir primary tmp
  runs_sentinel || return 0
  [ ! -f "$file" ] || return 0
  dir="$(dirname "$file")"
  : "${REDIS_SENTINEL_PASSWORD:?platform: a sentinel needs REDIS_SENTINEL_PASSWORD}"
  : "${REDIS_PASSWORD:?platform: a sentinel needs REDIS_PASSWORD (the data password)}"
  primary="${REDIS_REPLICA_OF:-${REDIS_SENTINEL_PRIMARY:-}}"
  if [ -z "$primary" ]; then
    if ! roles_include "${PLATFORM_ROLES:-data}" data; then
      echo "platform: a sentinel without the data role needs REDIS_SENTINEL_PRIMARY" \
        "('<primary address> <port>')" >&2
      exit 1
    fi
    local bind="${REDIS_BIND:-127.0.0.1}"
    primary="${bind%% *} ${REDIS_PORT:-6390}"
  fi
  install -d -m 750 -o "$PLATFORM_USER" -g "$PLATFORM_USER" "$dir"
  tmp="$(mktemp)"
  SENTINEL_PORT="${SENTINEL_PORT:-26379}" SENTINEL_BIND="${SENTINEL_BIND:-${REDIS_BIND:-127.0.0.1}}" \
    SENTINEL_DIR="$dir" SENTINEL_PASSWORD="$(redis_conf_quote "$REDIS_SENTINEL_PASSWORD")" \
    REDIS_PASSWORD="$(redis_conf_quote "$REDIS_PASSWORD")" \
    MASTER_NAME="${REDIS_SENTINEL_MASTER:-platform}" PRIMARY_HOST="${primary% *}" \
    PRIMARY_PORT="${primary##* }" DOWN_AFTER_MS=5000 FAILOVER_TIMEOUT_MS=60000 \
    "$SYSTEM_PYTHON" -c 'import os, string, sys
sys.stdout.write(string.Template(open(sys.argv[1]).read()).substitute(os.environ))' \
    "$PLATFORM_ROOT/platform/sentinel.conf" > "$tmp"
  # The address the other sentinels reach this one on (the same reason as replica-announce-ip).
  local sentinel_bind="${SENTINEL_BIND:-${REDIS_BIND:-127.0.0.1}}"
  echo "sentinel announce-ip ${sentinel_bind%% *}" >> "$tmp"
  # With REDIS_TLS the clients speak TLS to the sentinels and the data nodes (adr/0025): this
  # sentinel listens on TLS only, with this host's certificate, and reaches the data nodes
  # and the other sentinels over TLS.
  case "${REDIS_TLS:-}" in
    1|true|True|TRUE|yes|on)
      if [ -z "${REDIS_TLS_CERT:-}" ]; then
        rm -f "$tmp"
        echo "platform: REDIS_TLS=true: this host's sentinel speaks TLS and needs this host's" \
          "certificate, REDIS_TLS_CERT and REDIS_TLS_KEY (platform/certs server)" >&2
        exit 1
      fi
      redis_tls_lines "${SENTINEL_PORT:-26379}" >> "$tmp" ;;
  esac
  install -m 600 -o "$PLATFORM_USER" -g "$PLATFORM_USER" "$tmp" "$file"
  rm -f "$tmp"
}

# Is role $2 in the comma list $1?
roles_include() { case ",$1," in *",$2,"*) return 0 ;; *) return 1 ;; esac; }

# The units platform.target starts on this host: those of its roles (PLATFORM_ROLES, from the
# environment file; default all). Every unit file is installed either way.
role_units() {
  local roles="${PLATFORM_ROLES:-web,workers,beat,flower,data}" units=()
  roles_include "$roles" data && units+=(platform-redis.service)
  roles_include "$roles" web && units+=(platform-web.socket platform-web.service)
  roles_include "$roles" workers && units+=(platform-worker@1.service platform-worker@2.service)
  roles_include "$roles" beat && units+=(platform-beat@1.service platform-beat@2.service)
  roles_include "$roles" flower && units+=(platform-flower.service)
  runs_sentinel && units+=(platform-sentinel.service)
  echo "${units[*]}"
}

# Everything rendered from the environment file's values: redis.conf, the sentinel's file
# (once), the units, platform-manage. Install, upgrade and rollback call this one function
# with the values read from the file, so each renders what the first install rendered.
render_host_config() {
  write_redis_conf_for "$ETC_DIR/redis.conf"
  write_sentinel_conf_for "$DATA_DIR/sentinel/sentinel.conf"
  install_units
  install_manage_wrapper
}

install_units() {
  local unit tmp wants
  tmp="$(mktemp)"
  wants="$(role_units)"
  for unit in "$PLATFORM_ROOT"/platform/systemd/*; do
    # Every value escaped for sed's replacement (| & \): a value never becomes sed script.
    sed -e "s|@USER@|$(sed_escape "$PLATFORM_USER")|g" -e "s|@ETC_DIR@|$(sed_escape "$ETC_DIR")|g" \
        -e "s|@DATA_DIR@|$(sed_escape "$DATA_DIR")|g" -e "s|@APP_DIR@|$(sed_escape "$APP_DIR")|g" \
        -e "s|@WANTS@|$(sed_escape "$wants")|g" \
        -e "s|@WEB_LISTEN@|$(sed_escape "$(url_host_of "$WEB_HOST"):$WEB_PORT")|g" "$unit" > "$tmp"
    install_if_changed "$tmp" "$UNIT_DIR/$(basename "$unit")" 644 root root
  done
  rm -f "$tmp"
}

sed_escape() { printf '%s' "$1" | sed -e 's/[|&\\]/\\&/g'; }

install_manage_wrapper() {
  local tmp
  tmp="$(mktemp)"
  cat > "$tmp" <<WRAPPER
#!/bin/sh
# manage.py of the current release, as $PLATFORM_USER, with the platform's environment file.
set -e
cd "$DATA_DIR"
if [ "\$(id -un)" = "$PLATFORM_USER" ]; then
  exec env PLATFORM_ENV_FILE="$ENV_FILE" "$APP_DIR/current/venv/bin/python" "$APP_DIR/current/manage.py" "\$@"
fi
exec runuser -u "$PLATFORM_USER" -- env PLATFORM_ENV_FILE="$ENV_FILE" "$APP_DIR/current/venv/bin/python" "$APP_DIR/current/manage.py" "\$@"
WRAPPER
  install_if_changed "$tmp" "$MANAGE_WRAPPER" 755 root root
  rm -f "$tmp"
}

as_platform_user() {
  [ "$1" = manage ] && shift
  "$MANAGE_WRAPPER" "$@"
}

# manage.py of a given release (not necessarily the current one), as the platform's user.
release_manage() {
  local version="$1"; shift
  (cd "$DATA_DIR" && runuser -u "$PLATFORM_USER" -- env PLATFORM_ENV_FILE="$ENV_FILE" \
    "$APP_DIR/releases/$version/venv/bin/python" "$APP_DIR/releases/$version/manage.py" "$@")
}

# Point a symlink somewhere else in one rename, so nothing ever sees it missing.
switch_link() {
  local link="$1" target="$2"
  ln -sfn "$target" "$link.new"
  mv -T "$link.new" "$link"
}

# The order that loses nothing: each beat in turn (the other leads meanwhile), each worker in
# turn (warm shutdown: running tasks finish, reserved ones go back; the other worker serves),
# then the web workers (pages reconnect and replay), then Flower.
RESTART_ORDER=(platform-beat@2 platform-beat@1 platform-worker@1 platform-worker@2 platform-web platform-flower)

restart_in_order() {
  local prefix="$1" unit
  if [ -z "$prefix" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    for unit in "${RESTART_ORDER[@]}"; do
      say "restarting $unit"
      systemctl restart "$unit"
    done
  else
    say "no systemd running here: restart these units in this order: ${RESTART_ORDER[*]}"
  fi
}
