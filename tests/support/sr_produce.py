#!/usr/bin/env python3
"""Produces DNS-log records in the Confluent wire format with Confluent's own serializers.

The reference encoders, not ours: confluent-kafka's AvroSerializer (fastavro underneath) and
ProtobufSerializer (Google's protobuf runtime), registering their schema in the registry at
--registry (auto.register.schemas, as producers usually run) and framing every value with
the magic byte and the schema id it got back. Used by tests/it/schema_registry.rs.

    sr_produce.py --brokers HOST:PORT --topic T --registry URL
                  --format avro|protobuf|protobuf-imports
                  [--partition P] [--user U --password P]  < records.jsonl

protobuf-imports: DnsLog importing the files Confluent's registry knows built in
(google/type/date.proto for a `day` field, confluent/meta.proto for a field option), which
the serializer never registers as references.

Each stdin line is a JSON object: client_ip, domain (null: absent), time_ms (epoch ms),
query_type ("A"/"AAAA"), price (a decimal string, avro only). One offset per record is
printed, in order. Every record is its own batch (a flush after each), so the printed
offsets are the records' own; tansu, the test broker before Apache Kafka, also needed it
for its log end offsets (see tests/support/env.md).
"""

import argparse
import datetime
import decimal
import json
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext

AVRO_SCHEMA = json.dumps({
    "type": "record",
    "name": "DnsLog",
    "namespace": "example.dns",
    "fields": [
        {"name": "client_ip", "type": "string"},
        {"name": "domain", "type": ["null", "string"], "default": None},
        {"name": "time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal",
                                   "precision": 10, "scale": 2}},
        {"name": "query_type", "type": {"type": "enum", "name": "QueryType",
                                        "symbols": ["A", "AAAA"]}},
    ],
})


def avro_serializer(registry):
    from confluent_kafka.schema_registry.avro import AvroSerializer

    def to_dict(r, _ctx):
        t = datetime.datetime.fromtimestamp(r["time_ms"] / 1000, tz=datetime.timezone.utc)
        return {
            "client_ip": r["client_ip"],
            "domain": r.get("domain"),
            "time": t,
            "day": t.date(),
            "price": decimal.Decimal(r.get("price", "0.00")),
            "query_type": r.get("query_type", "A"),
        }

    return AvroSerializer(registry, AVRO_SCHEMA, to_dict, conf={"auto.register.schemas": True})


def protobuf_serializer(registry, imports=False):
    """DnsLog built at run time from a FileDescriptorProto (no protoc here), exactly what a
    generated module holds. With `imports`, it also imports google/type/date.proto (a `day`
    field) and confluent/meta.proto (a field option), as schemas of Confluent's own tooling
    do."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    F = descriptor_pb2.FieldDescriptorProto
    deps = ["google/protobuf/timestamp.proto"]
    if imports:
        deps += ["google/type/date.proto", "confluent/meta.proto"]
    fd = descriptor_pb2.FileDescriptorProto(name="example/dns.proto", package="example.dns",
                                            syntax="proto3", dependency=deps)
    # A first message, so that DnsLog's message index is [1] (not the default [0]).
    fd.message_type.add(name="Header").field.add(name="source", number=1, type=F.TYPE_STRING,
                                                 label=F.LABEL_OPTIONAL)
    m = fd.message_type.add(name="DnsLog")
    m.field.add(name="client_ip", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m.field.add(name="domain", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m.field.add(name="time", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                type_name=".google.protobuf.Timestamp")
    m.field.add(name="query_type", number=4, type=F.TYPE_ENUM, label=F.LABEL_OPTIONAL,
                type_name=".example.dns.DnsLog.QueryType")
    e = m.enum_type.add(name="QueryType")
    e.value.add(name="A", number=0)
    e.value.add(name="AAAA", number=1)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    if imports:
        from google.protobuf import descriptor_pb2 as dpb
        from google.type import date_pb2
        from confluent_kafka.schema_registry.confluent import meta_pb2
        m.field.add(name="day", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".google.type.Date")
        m.field[0].options.Extensions[meta_pb2.field_meta].doc = "the client's address"
        pool.AddSerializedFile(dpb.DESCRIPTOR.serialized_pb)
        pool.AddSerializedFile(date_pb2.DESCRIPTOR.serialized_pb)
        pool.AddSerializedFile(meta_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(fd)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("example.dns.DnsLog"))

    # skip.known.types (the default): google/protobuf/*.proto imports are not registered as
    # references; the registry and its readers know them.
    ser = ProtobufSerializer(cls, registry, conf={"auto.register.schemas": True,
                                                   "use.deprecated.format": False})

    def build(r):
        msg = cls(client_ip=r["client_ip"], domain=r.get("domain") or "",
                  query_type=1 if r.get("query_type") == "AAAA" else 0)
        msg.time.FromMilliseconds(r["time_ms"])
        if imports:
            d = datetime.datetime.fromtimestamp(r["time_ms"] / 1000, tz=datetime.timezone.utc)
            msg.day.year, msg.day.month, msg.day.day = d.year, d.month, d.day
        return msg

    return lambda r, ctx: ser(build(r), ctx)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--registry", required=True)
    ap.add_argument("--format", choices=["avro", "protobuf", "protobuf-imports"], required=True)
    ap.add_argument("--partition", type=int, default=0)
    ap.add_argument("--user")
    ap.add_argument("--password")
    a = ap.parse_args()

    conf = {"url": a.registry}
    if a.user:
        conf["basic.auth.user.info"] = f"{a.user}:{a.password or ''}"
    registry = SchemaRegistryClient(conf)
    if a.format == "avro":
        serialize = avro_serializer(registry)
    else:
        serialize = protobuf_serializer(registry, imports=a.format == "protobuf-imports")

    producer = Producer({"bootstrap.servers": a.brokers, "linger.ms": 0})
    ctx = SerializationContext(a.topic, MessageField.VALUE)
    for line in sys.stdin:
        if not line.strip():
            continue
        record = json.loads(line)
        offsets = []

        def delivered(err, msg):
            if err is not None:
                sys.exit(f"delivery failed: {err}")
            offsets.append(msg.offset())

        producer.produce(a.topic, value=serialize(record, ctx), partition=a.partition,
                         on_delivery=delivered)
        producer.flush(30)
        if not offsets:
            sys.exit("record not acknowledged within 30 s")
        print(offsets[0], flush=True)


if __name__ == "__main__":
    main()
