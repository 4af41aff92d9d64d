-- The seed's table and the "pipeline" of the local stack: a Doris Routine Load job that
-- consumes topic `test` into it. A Flink job (docs/OPERATOR.md) would take its place in
-- production. The job keeps its offsets inside Doris, not in a Kafka consumer group, so
-- the auditor's config has no pipeline_group (records are due `grace` after being read).
CREATE DATABASE IF NOT EXISTS example_db;

CREATE TABLE IF NOT EXISTS example_db.dns_logs_from_flink01 (
  client_ip VARCHAR(64), domain VARCHAR(512), time DATETIME, target_ip VARCHAR(64),
  rcode VARCHAR(16), query_type VARCHAR(16), authority_record VARCHAR(512),
  add_msg VARCHAR(512), dns_ip VARCHAR(64)
) DUPLICATE KEY(client_ip, domain, time)
DISTRIBUTED BY HASH(client_ip) BUCKETS 10 PROPERTIES ("replication_num" = "1");

CREATE ROUTINE LOAD example_db.dns_logs_load ON dns_logs_from_flink01
COLUMNS TERMINATED BY "|"
PROPERTIES ("desired_concurrent_number" = "1", "max_batch_interval" = "5")
FROM KAFKA (
  "kafka_broker_list" = "kafka:9092",
  "kafka_topic" = "test",
  "property.kafka_default_offsets" = "OFFSET_BEGINNING"
);
