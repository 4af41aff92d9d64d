#!/usr/bin/env bash
# Writes seed-shaped DNS log lines (9 pipe-separated fields) to $TOPIC, one record per
# line, about $RATE per second, keys unique by (client_ip, domain, time): the shape of the
# seed's Doris table, so the auditor's key_columns match finds each one.
set -euo pipefail
rate=${RATE:-20}
i=0
while true; do
  for _ in $(seq "$rate"); do
    i=$((i + 1))
    printf '10.%d.%d.%d|www.example-%d.com|%s|93.184.216.34|NOERROR|A|ns1.example.com|-|8.8.8.8\n' \
      $((i / 65536 % 256)) $((i / 256 % 256)) $((i % 256)) "$i" "$(date -u '+%Y-%m-%d %H:%M:%S')"
  done
  sleep 1
done | /opt/kafka/bin/kafka-console-producer.sh --bootstrap-server "$BROKERS" --topic "$TOPIC" \
  --producer-property linger.ms=50
