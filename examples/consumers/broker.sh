#!/usr/bin/env bash
# A private RabbitMQ to try the consumers with: Debian's rabbitmq-server (installed, its system
# service not needed) run as a broker of its own, on loopback ports, with its data in DIR.
#   broker.sh start [PORT] [DIR]   AMQP on 127.0.0.1:PORT (default 5673; PORT+1 and PORT+2 for
#                                  its distribution and epmd), user guest / guest; returns once
#                                  it answers
#   broker.sh stop [DIR]           stops it (the data stays in DIR until you remove it)
# DIR defaults to ${TMPDIR:-/tmp}/idempotency-rabbitmq. The same script runs the brokers test
# suite's broker (test/brokers/rabbitmq.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
default_dir=${TMPDIR:-/tmp}/idempotency-rabbitmq
case ${1:-} in
  start) exec bash "$here/../../test/brokers/rabbitmq.sh" start "${3:-$default_dir}" "${2:-5673}" ;;
  stop) exec bash "$here/../../test/brokers/rabbitmq.sh" stop "${2:-$default_dir}" ;;
  *) echo "usage: broker.sh start [PORT] [DIR] | stop [DIR]" >&2; exit 2 ;;
esac
