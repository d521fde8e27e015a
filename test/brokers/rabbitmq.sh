#!/usr/bin/env bash
# A private RabbitMQ for tests and benchmarks: a foreground broker of its own (node name, data,
# logs, loopback ports, epmd port, no plugins), never the system service.
#   rabbitmq.sh start DIR PORT   the broker on 127.0.0.1:PORT (AMQP), PORT+1 (distribution),
#                                PORT+2 (its own epmd); waits (bounded) until AMQP answers
#   rabbitmq.sh stop DIR         a clean stop (SIGTERM), then its epmd
# Needs Debian's rabbitmq-server package (scripts/lib.sh ensure_rabbitmq installs it).
set -euo pipefail
cmd=$1 dir=$2
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
server=/usr/lib/rabbitmq/bin/rabbitmq-server

stop() {
  local pid port
  if [[ -f $dir/pid ]]; then
    pid=$(cat "$dir/pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null
    fi
    rm -f "$dir/pid"
  fi
  # Our own epmd (it is started by the first node on its port, and outlives it).
  if [[ -f $dir/epmd_port ]]; then
    port=$(cat "$dir/epmd_port")
    epmd -port "$port" -kill >/dev/null 2>&1 || true
  fi
}

# answers PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
  local port=$1 pid
  [[ -x $server ]] || { echo "rabbitmq-server is not installed" >&2; return 1; }
  if answers "$port"; then echo "port $port is taken already" >&2; return 1; fi
  mkdir -p "$dir/mnesia" "$dir/log" "$dir/home"
  echo '[].' >"$dir/enabled_plugins"
  cat >"$dir/rabbitmq.conf" <<CONF
listeners.tcp.1 = 127.0.0.1:$port
loopback_users.guest = true
disk_free_limit.absolute = 50MB
log.console = false
log.file.level = info
CONF
  echo $((port + 2)) >"$dir/epmd_port"
  # setsid: a process group of its own, so stop can end all of it and nothing else.
  HOME=$dir/home RABBITMQ_NODENAME=idem$port@localhost RABBITMQ_USE_LONGNAME=false \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$port \
    RABBITMQ_DIST_PORT=$((port + 1)) ERL_EPMD_PORT=$((port + 2)) ERL_EPMD_ADDRESS=127.0.0.1 \
    RABBITMQ_MNESIA_BASE=$dir/mnesia RABBITMQ_LOG_BASE=$dir/log \
    RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    RABBITMQ_CONF_ENV_FILE=/dev/null RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config \
    setsid "$server" >>"$dir/server.out" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$dir/pid"
  for _ in $(seq 1200); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "rabbitmq-server exited; its output:" >&2
      tail -n 40 "$dir/server.out" >&2
      return 1
    fi
    # The AMQP listener opens once the broker has booted.
    if answers "$port"; then return 0; fi
    sleep 0.1
  done
  echo "rabbitmq-server did not answer on $port within 120 s" >&2
  tail -n 40 "$dir/server.out" >&2
  return 1
}

case $cmd in
  start) start "$3" ;;
  stop) stop ;;
  *) echo "usage: rabbitmq.sh start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
