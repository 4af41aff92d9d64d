"""The seed's pipeline as a real Flink job (scripts/flink-seed.sh drives it).

A PyFlink 2.0 local MiniCluster with its REST API on --rest-port runs one SQL job named
--job: a Kafka source (group id --group, --startup mode, checkpoints every --checkpoint-ms
AT_LEAST_ONCE, offsets committed to Kafka when a checkpoint completes) into a MariaDB table
through flink-connector-jdbc (the MariaDB dialect of MariaDbJdbcFactory.java). Each row
keeps its Kafka partition and offset, so the auditor matches by offset_columns. With
--restore PATH the job starts from that retained checkpoint (execution.savepoint.path).

It runs until killed: the seed's crash is a kill -9 of this process group.
"""

import argparse
import sys
import time

from pyflink.common import Configuration
from pyflink.table import EnvironmentSettings, TableEnvironment


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--jdbc-url", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--db-user", default="root")
    p.add_argument("--db-password", default="")
    p.add_argument("--rest-port", type=int, required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--checkpoint-ms", type=int, default=3000)
    p.add_argument("--startup", default="group-offsets")
    p.add_argument("--restore", default="")
    p.add_argument("--jars", default="")
    a = p.parse_args()

    conf = Configuration()
    conf.set_string("rest.port", str(a.rest_port))
    conf.set_string("rest.bind-address", "127.0.0.1")
    conf.set_string("rest.address", "127.0.0.1")
    conf.set_string("pipeline.name", a.job)
    conf.set_string("parallelism.default", "1")
    conf.set_string("execution.checkpointing.interval", f"{a.checkpoint_ms} ms")
    conf.set_string("execution.checkpointing.mode", "AT_LEAST_ONCE")
    conf.set_string("execution.checkpointing.dir", f"file://{a.checkpoint_dir}")
    # A crash leaves the last completed checkpoint behind for the restart from it.
    conf.set_string("execution.checkpointing.externalized-checkpoint-retention",
                    "RETAIN_ON_CANCELLATION")
    conf.set_string("restart-strategy.type", "none")
    if a.restore:
        conf.set_string("execution.state-recovery.path", a.restore)
        conf.set_string("execution.savepoint.path", a.restore)
    if a.jars:
        conf.set_string("pipeline.jars", a.jars)
        conf.set_string("pipeline.classpaths", a.jars)

    env = TableEnvironment.create(
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build())
    env.execute_sql(f"""
        CREATE TABLE src (
            client_ip STRING, domain STRING, `time` STRING, target_ip STRING, rcode STRING,
            query_type STRING, authority_record STRING, add_msg STRING, dns_ip STRING,
            `kafka_partition` INT METADATA FROM 'partition' VIRTUAL,
            `kafka_offset` BIGINT METADATA FROM 'offset' VIRTUAL
        ) WITH (
            'connector' = 'kafka',
            'topic' = '{a.topic}',
            'properties.bootstrap.servers' = '{a.bootstrap}',
            'properties.group.id' = '{a.group}',
            'properties.auto.offset.reset' = 'earliest',
            'scan.startup.mode' = '{a.startup}',
            'format' = 'csv',
            'csv.field-delimiter' = '|',
            'csv.ignore-parse-errors' = 'true'
        )""")
    env.execute_sql(f"""
        CREATE TABLE sink (
            `partition` INT, `offset` BIGINT, client_ip STRING, domain STRING, `time` STRING,
            PRIMARY KEY (`partition`, `offset`) NOT ENFORCED
        ) WITH (
            'connector' = 'jdbc',
            'url' = '{a.jdbc_url}',
            'table-name' = '{a.table}',
            'username' = '{a.db_user}',
            'password' = '{a.db_password}',
            'sink.buffer-flush.max-rows' = '1',
            'sink.buffer-flush.interval' = '200 ms'
        )""")
    result = env.execute_sql(
        "INSERT INTO sink SELECT kafka_partition, kafka_offset, client_ip, domain, `time` FROM src")
    client = result.get_job_client()
    print(f"job {a.job} submitted: {client.get_job_id() if client else '?'}", flush=True)
    # Until killed (kill -9 is the seed's crash).
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
