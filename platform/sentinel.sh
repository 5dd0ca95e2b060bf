# Redis Sentinel for development and CI (PLATFORM_REDIS=sentinel; default single). Sourced by
# platform/up after lib.sh. On the data host: a primary (var/redis.conf), a replica
# (var/redis-replica.conf) and three sentinels (var/sentinel/N/sentinel.conf, generated from
# platform/sentinel.conf), all on REDIS_BIND; every platform process reaches them through
# REDIS_SENTINELS instead of REDIS_URL (celery_conf/connections.py, adr/0025).

SENTINEL_MASTER_NAME=platform
# Production timings (platform/sentinel.conf says why): the development platform behaves as
# an installed one does.
SENTINEL_DOWN_AFTER_MS="${SENTINEL_DOWN_AFTER_MS:-5000}"
SENTINEL_FAILOVER_TIMEOUT_MS="${SENTINEL_FAILOVER_TIMEOUT_MS:-60000}"

# The variables supervisord.conf and the platform's settings read; var/platform.env again.
ensure_sentinel_env() {
  local mode="${PLATFORM_REDIS:-single}"
  export SUPERVISOR_INCLUDES=""
  case "$mode" in
    single) return 0 ;;
    sentinel) ;;
    *) echo "platform: PLATFORM_REDIS must be single or sentinel, got '$mode'" >&2; exit 1 ;;
  esac
  if ! has_role data; then
    echo "platform: PLATFORM_REDIS=sentinel starts the Redis group on this host, which needs" \
      "the 'data' role; another host reaches it with REDIS_SENTINELS (README, 'Sentinel')" >&2
    exit 1
  fi
  if [ -n "${REDIS_TLS_CERT:-}" ]; then
    echo "platform: PLATFORM_REDIS=sentinel on one box is loopback only: no REDIS_TLS_CERT" >&2
    exit 1
  fi
  local env_file="$PLATFORM_VAR_DIR/dev.env"
  # Generated once, like the others; a dev.env from before Sentinel gets it added.
  unset REDIS_SENTINEL_PASSWORD
  env_file_export "$env_file" REDIS_SENTINEL_PASSWORD
  if [ -z "${REDIS_SENTINEL_PASSWORD:-}" ]; then
    (umask 077
     export REDIS_SENTINEL_PASSWORD="$(random_secret)"
     env_file_render REDIS_SENTINEL_PASSWORD >> "$env_file")
    env_file_export "$env_file" REDIS_SENTINEL_PASSWORD
  fi
  export REDIS_REPLICA_PORT="${REDIS_REPLICA_PORT:-$((REDIS_PORT + 1))}"
  export SENTINEL_PORTS="${SENTINEL_PORTS:-26390 26391 26392}"
  local bind="${REDIS_BIND%% *}" port list=()
  for port in $SENTINEL_PORTS; do list+=("$(url_host_of "$bind"):$port"); done
  if [ "${#list[@]}" -ne 3 ]; then
    echo "platform: SENTINEL_PORTS must name three ports, got '$SENTINEL_PORTS'" >&2
    exit 1
  fi
  REDIS_SENTINELS="$(IFS=,; echo "${list[*]}")"
  export REDIS_SENTINELS REDIS_SENTINEL_MASTER="$SENTINEL_MASTER_NAME"
  # Not used under Sentinel (settings ignore it when REDIS_SENTINELS is set): emptied so that
  # nothing points at one node by mistake.
  export REDIS_URL=""
  export SUPERVISOR_INCLUDES=supervisord-sentinel.conf
  write_platform_env  # with the sentinel settings: REDIS_SENTINELS is set now
}

# With PLATFORM_REDIS=sentinel: every sentinel knows the replica and the two other sentinels,
# so a failover can happen. A sentinel learns the replica from the primary's INFO, every 10 s;
# one that started before the replica connected knows none until then. If it is elected to
# lead a failover in that window, it aborts (-failover-abort-no-good-slave), and the next try
# waits twice the failover timeout (120 s in production). platform/up says "running" only
# after this holds; tests/platform/test_up_sentinel.py kills the primary right after.
sentinels_up() {
  [ "${PLATFORM_REDIS:-single}" = sentinel ] || return 0
  local port info
  for port in $SENTINEL_PORTS; do
    info="$(REDISCLI_AUTH="$REDIS_SENTINEL_PASSWORD" redis-cli -h "${REDIS_BIND%% *}" \
      -p "$port" sentinel master "$SENTINEL_MASTER_NAME" 2>/dev/null)" || return 1
    [ "$(sed -n '/^num-slaves$/{n;p;}' <<< "$info")" -ge 1 ] 2>/dev/null || return 1
    [ "$(sed -n '/^num-other-sentinels$/{n;p;}' <<< "$info")" -ge 2 ] 2>/dev/null || return 1
  done
}

# The node that is primary now: what the first sentinel recorded last time (Sentinel rewrites
# its file after a failover), else the first node. Starting the group again on the old primary
# would make the promoted node resync from it and drop what it took after the failover.
sentinel_primary_port() {
  local recorded
  recorded="$(sed -n "s/^sentinel monitor $SENTINEL_MASTER_NAME [^ ]* \([0-9]*\) .*/\1/p" \
    "$PLATFORM_VAR_DIR/sentinel/1/sentinel.conf" 2>/dev/null | head -n 1)"
  if [ "$recorded" = "$REDIS_REPLICA_PORT" ]; then echo "$REDIS_REPLICA_PORT"; else echo "$REDIS_PORT"; fi
}

# One node's redis.conf: the shared platform/redis.conf, its port and directory, the data
# password for clients and for its own primary (masterauth: a demoted primary needs it too).
write_redis_node_conf() {
  local file="$1" port="$2" dir="$3" primary_port="$4"
  mkdir -p "$dir"
  umask 077
  cat > "$file" <<CONF
include $PLATFORM_ROOT/platform/redis.conf
port $port
dir $dir
requirepass $REDIS_PASSWORD
masterauth $REDIS_PASSWORD
bind $REDIS_BIND
CONF
  if [ "$port" != "$primary_port" ]; then
    echo "replicaof ${REDIS_BIND%% *} $primary_port" >> "$file"
  fi
  umask 022
}

# Every node's and every sentinel's file, generated at each start (never over a running
# group: platform/up refuses a second start while supervisord runs).
write_sentinel_confs() {
  [ "${PLATFORM_REDIS:-single}" = sentinel ] || return 0
  local primary index=1 port dir
  primary="$(sentinel_primary_port)"
  write_redis_node_conf "$PLATFORM_VAR_DIR/redis.conf" "$REDIS_PORT" "$PLATFORM_VAR_DIR/redis" "$primary"
  write_redis_node_conf "$PLATFORM_VAR_DIR/redis-replica.conf" "$REDIS_REPLICA_PORT" \
    "$PLATFORM_VAR_DIR/redis-replica" "$primary"
  for port in $SENTINEL_PORTS; do
    dir="$PLATFORM_VAR_DIR/sentinel/$index"
    mkdir -p "$dir"
    (umask 077
     SENTINEL_PORT="$port" SENTINEL_BIND="$REDIS_BIND" SENTINEL_DIR="$dir" \
       SENTINEL_PASSWORD="$REDIS_SENTINEL_PASSWORD" MASTER_NAME="$SENTINEL_MASTER_NAME" \
       PRIMARY_HOST="${REDIS_BIND%% *}" PRIMARY_PORT="$primary" \
       DOWN_AFTER_MS="$SENTINEL_DOWN_AFTER_MS" FAILOVER_TIMEOUT_MS="$SENTINEL_FAILOVER_TIMEOUT_MS" \
       "$VENV/bin/python" -c 'import os, string, sys
sys.stdout.write(string.Template(open(sys.argv[1]).read()).substitute(os.environ))' \
       "$PLATFORM_ROOT/platform/sentinel.conf" > "$dir/sentinel.conf")
    index=$((index + 1))
  done
}
