#!/usr/bin/env python3
"""Renders docs/RELIABILITY.md from the figures the fault suite recorded.

    scripts/render-reliability.py FIGURES.jsonl OUT.md --exit-code N --command CMD

FIGURES.jsonl holds one JSON object per scenario run (tests/it/figures.rs). Every scenario
of the catalogue below gets one table row; a scenario without a line shows "not run":
the document never shows a number no test produced. Several lines of one scenario (a test
run in a loop) are summed. Lines of scenarios not in the catalogue are still shown, last.
"""

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys

# (scenario id, issue item, what is injected). Order = table order.
CATALOGUE = [
    ("kill9_random_moments", "1", "`kill -9` of the daemon at 20 seeded random moments of a 100 k-record run with known losses, restarted each time"),
    ("sink_outage_2m", "2", "sink unreachable for 2 minutes (proxy resets every connection) while records keep arriving"),
    ("sink_slow_2x_verify_interval", "2", "every sink reply delayed 2x verify_interval"),
    ("broker_unavailable_1m", "3", "broker unreachable for 1 minute (private tansu behind a proxy)"),
    ("broker_frozen_30s", "3", "broker process frozen (SIGSTOP) for 30 s: connections open, nothing answers"),
    ("pipeline_lag_10x_grace", "4", "pipeline stops committing for 10x grace while records arrive"),
    ("pipeline_rewind", "4", "pipeline rewinds to an older checkpoint and writes records again"),
    ("multi_instance_rebalance", "5", "two instances in one group on 6 partitions; an instance stopped and started mid-run"),
    ("multi_instance_kill9", "5", "two instances in one group; a partition owner killed (-9) mid-run, the other takes over"),
    ("hostile_payloads", "6", "hostile records through Kafka (nesting bombs, 1 MiB values, invalid UTF-8, ...)"),
    ("escaper_mariadb_round_trip", "6", "hostile strings through the SQL literal escaper and the real MariaDB"),
    ("sink_never_answers_bounded_memory", "8", "sink accepts connections and never answers; memory sampled while paused"),
    ("handover_2000_gaps_100kb_limit", "14", "2,000 open gaps handed over between two instances (A to B, then 2,020 from B back to A) through a 100 kB record limit (`kafka.properties.\"message.max.bytes\" = \"100000\"`)"),
    ("systematic_loss_every_second_record", "14", "1,000,000 records, every second one lost (500,000 one-record gaps), offset_columns on one partition"),
    ("sink_hangs_five_minutes", "14", "sink accepts connections and never answers for 5 minutes while the pipeline writes and commits on 8 partitions (`max.poll.interval.ms` 10 s)"),
    ("stalled_partition_backpressure", "14", "one partition's pipeline stops committing while more than `max_pending` records arrive on it (4 partitions; the old rule then paused all four) and the other three receive records with known losses"),
    ("deleted_unread_range_in_pieces", "41.2", "an auditor stopped while N offsets (`GAP_AUDITOR_DELETED_N`: 20,000,000 here, 2,000,000 in CI) were produced to one partition, every second one written, then deleted by DeleteRecords (Apache Kafka 4.4) before it restarted; the other partition gets 3 losses once it runs; `max_deleted_checked` 16,000"),
    ("keys_total_loss_rss_flat", "14", "key_columns against an empty sink table (the pipeline commits and writes nothing) on 2 partitions, at the highest rate the machine audits, for 10 minutes with `max_missing_keys` 50,000; VmRSS sampled every 10 s, every later sample within 10 % of the first minute's level (its last 30 s) required"),
    ("giveup_soak_every_second_record", "41.1", "offset_columns on 2 partitions, every second record lost (the pipeline writes the even offsets), at the highest rate the machine audits, for 10 minutes with `give_up_after` shortened to 30 s (an accelerated day: millions of one-record gaps given up); VmRSS read every second, a sample the lowest reading of each 10 s (what is held between rounds), the level the highest sample of minute 2's last 30 s, the middle of every 3 consecutive samples after it within 10 % of the level, peak VmHWM <= 256 MiB, the store's gaps read back exact, then 10 idle rounds"),
    ("handover_idle_100k_gaps", "41.3", "two instances with a handover topic; 100,000 given-up gaps (written into A's store before it starts) and 1,000 live ones on one partition, 10 of them acknowledged; then one clean record a second for 10 s, the handover topic's bytes counted; then a replay mark set from the CLI, and B takes the partition over from A"),
    ("handover_retired_200k", "41.3", "two instances with a handover topic; 2,000, then 200,000 given-up gaps (written into A's store before it starts) and 50 live ones on one partition; B takes the partition over from A. What the takeover read is the handover topic up to its end when A stopped (B publishes nothing while it imports); then B's gauges at once, and its store against A's until equal"),
    ("api_gaps_500k_four_listings", "41.4", "500,000 gaps in the store (inserted straight into SQLite); a page of `/api/gaps?state=all&limit=1000` from the middle of the listing, then four concurrent full listings (streamed, each read to its end by a client that keeps nothing); VmRSS of the serving process (the lib test binary, debug build) sampled every 20 ms"),
    ("api_gaps_listings_beside_writes", "41.4", "50,000 gaps; one `/api/gaps` listing held half-read by a client that stopped reading and three more in a loop, while a round's store write is timed 20 times"),
    ("secrets_never_leak_run", "security", "known secrets configured (sink passwords, ES api_key, SASL password, API token); logs, HTTP answers and `check` output searched for them"),
    ("graceful_shutdown_sigterm", "graceful shutdown", "SIGTERM mid-round (sink replies slower than a round), restarted each time"),
    ("sigterm_key_columns_backlog", "13.17", "SIGTERM during a key_columns round over 20,000 due keys, sink replies delayed 700 ms"),
    ("shared_key_two_partitions", "13.1", "one key on two partitions (a DNS A and AAAA answer in one second), both rows written, the pipeline committed past both"),
    ("shared_key_commits_in_steps", "13.2", "keys carried by two records each, rows written first, commits one offset per round; one row never written"),
    ("misspelt_pipeline_group", "13.5", "pipeline_group misspelt by one letter while the pipeline lags 3x grace"),
    ("upsert_key_shared_rows", "34.1", "key_columns on the seed DDL with `PRIMARY KEY (client_ip, domain, time)`, written with `INSERT … ON DUPLICATE KEY UPDATE` (a Doris UNIQUE KEY table, Flink's JDBC upsert mode): 48 records on 2 partitions, 8 sharing another record's key (one row between them), 2 records dropped"),
    ("typed_key_datetime_milliseconds", "34.2", "key_columns on the README's seed DDL (`time DATETIME`): 30 record times with milliseconds, which MariaDB truncates on INSERT; 2 records dropped"),
    ("typed_key_two_datetime_spellings", "34.2", "two spellings of one DATETIME (`T` and space) in one key batch, both rows written; one other record dropped"),
    ("es_key_over_ignore_above", "34.5", "key_columns on the `.keyword` sub-fields of a dynamically mapped OpenSearch index (`ignore_above` 256): 5 of 10 records carry a 300-character domain the server does not index; one long and one short record dropped"),
    ("shared_table_topic_column", "34.4", "offset_columns on a table topics `test` and `other` both write (a Connect sink with `topics.regex`), `other` holding a row at `test`'s dropped coordinate (0, 5): without `topic_column` the audit refuses to start naming it; with a `topic` column and `topic_column` set, on a fresh state"),
    ("deleted_row_frees_its_claim", "34.3", "key_columns on the seed DDL: a confirmed record's row deleted (`DELETE`, as a TTL or a dropped Doris partition does), then the same line produced again and written"),
    ("kept_row_keeps_its_claim", "34.3", "the control of the above: the confirmed record's row kept, the line produced again and dropped by the pipeline"),
    ("key_arity_changed_between_restarts", "34.6", "key_columns restarted with a key field added (`match.key` 2 then 3 fields): a missing record stored with the old key, a new one missing then written late"),
    ("unreadable_partition_state", "34.8", "one partition's progress row and missing-run item corrupted in the SQLite store while the auditor is stopped; the other partition's gap written late meanwhile"),
    ("recreated_topic_key_columns", "34.7", "key_columns (seed DDL): the auditor stopped, its topic deleted and created again (Apache Kafka 4.4) with 12 records, 10 repeating the old records' lines, the old rows left in the sink; 2 new records dropped (one repeating an old key); the auditor restarted"),
    ("recreated_topic_offset_columns", "34.7", "offset_columns: the auditor stopped, its topic deleted and created again with 12 records, the old rows left at the same coordinates; 1 record dropped beyond the old topic's offsets; the auditor restarted"),
]

# How the suite works: fixed prose (no figures), rendered above the per-scenario notes.
METHOD = [
    "- Real components only: an Apache Kafka broker, MariaDB (the MySQL-protocol sink), "
    "OpenSearch (the Elasticsearch-API sink), the "
    "real `gap-auditor` binary where a process is killed, stopped or measured "
    "(tests/it/faults/, tests/faults_private.rs). The pipeline is a stand-in that writes "
    "rows and commits its consumer group like a checkpointing job; the records it drops are "
    "the ground truth.",
    "- Sink faults go through a TCP proxy the test controls (tests/it/faults/proxy.rs), in "
    "front of the shared MariaDB: *refuse* resets every connection (a dead server), *delay* "
    "holds every reply for a fixed time (a slow one), *blackhole* accepts and never answers. "
    "The pipeline keeps writing straight to MariaDB, so only the auditor's path fails.",
    "- The broker outage uses a private tansu on free ports that advertises a proxy's "
    "address, so every client connection goes through the proxy, which refuses them for a "
    "minute; then the tansu process itself is frozen (SIGSTOP) for 30 s, so connections "
    "stay open and requests time out. The tansu build the suite uses stores in memory only, "
    "so killing and restarting its process would bring it back empty: a different fault (a "
    "recreated topic), not an outage.",
    "- `kill -9` and `records_lost_total`: counters are per process and restart at 0. The "
    "daemon increments its verdict counters only after the SQLite transaction that holds "
    "the verdicts (docs/SEMANTICS.md, Offsets), so a lifetime never exports a loss it did "
    "not persist, and the next lifetime never re-counts one that was. The suite scrapes "
    "`/metrics` right before each kill and checks, per lifetime, exported <= persisted; "
    "the persisted amounts sum to the truth. Increments after the last scrape of a "
    "lifetime are what a kill can hide from Prometheus; the gap store keeps them.",
    "- Graceful shutdown: SIGTERM cuts the verify round in flight short (its unanswered "
    "questions stay unknown; nothing is decided on them), persists what was decided, commits "
    "the settled watermark (the suite reads the group's committed offset back and compares it "
    "with the store's) and exits 0. The bounds asserted (15 s; 5 s for a key_columns backlog "
    "round) are functional bounds that catch a hung drain, not performance targets.",
    "- Memory: VmRSS of the daemon from /proc/PID/status, once a second for 30 s while "
    "consumption is paused at `max_pending`.",
]

COLUMNS = [
    "Item", "Scenario", "Runs", "Faults injected", "Lost records expected / reported",
    "Gaps expected / reported", "False positives", "False negatives", "Verdict",
]


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
    except OSError:
        pass
    mem = "unknown"
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(l for l in f if l.startswith("MemTotal")).split()[1])
            mem = f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    tansu = os.environ.get("GAP_AUDITOR_TEST_TANSU", "tansu")
    return [
        ("Machine", f"{platform.system()} {platform.release()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), {mem} RAM"),
        ("Broker", f"Apache Kafka {pom_property('scripts/kafka/pom.xml', 'kafka.version')} (KRaft, one node); "
         f"the broker-outage scenarios (tests/faults_private.rs): {sh(tansu, '--version')} (memory storage)"),
        ("Search server", f"OpenSearch {pom_property('scripts/opensearch/pom.xml', 'opensearch.version')}"),
        ("Sink", sh("mariadbd", "--version")),
        ("Toolchain", sh("rustc", "--version")),
        ("Commit", sh("git", "describe", "--always", "--dirty")),
    ]


def pom_property(path, name):
    """A `<properties>` value of a pom kept in the repository (the servers' versions)."""
    try:
        with open(path) as f:
            m = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", f.read())
        return m.group(1) if m else "(version unknown)"
    except OSError:
        return "(version unknown)"


def load(path):
    runs = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                fig = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON: {e}")
            runs.setdefault(fig["scenario"], []).append(fig)
    return runs


def row(item, scenario, lines):
    if not lines:
        return [item, f"`{scenario}`", "not run", "", "", "", "", "", "not run"]
    total = {k: sum(l[k] for l in lines) for k in (
        "runs", "faults", "expected_lost", "reported_lost", "expected_gaps",
        "reported_gaps", "false_positives", "false_negatives")}
    exact = (total["expected_lost"] == total["reported_lost"]
             and total["expected_gaps"] == total["reported_gaps"]
             and total["false_positives"] == 0 and total["false_negatives"] == 0)
    return [
        item, f"`{scenario}`", str(total["runs"]), str(total["faults"]),
        f"{total['expected_lost']} / {total['reported_lost']}",
        f"{total['expected_gaps']} / {total['reported_gaps']}",
        str(total["false_positives"]), str(total["false_negatives"]),
        "expected == reported" if exact else "**MISMATCH**",
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("figures")
    ap.add_argument("out")
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--command", default="scripts/reliability.sh")
    ap.add_argument("--seconds", type=int, default=None)
    # Figures gathered over more than one commit (a scenario re-run after the suite): say so
    # instead of the commit the document happens to be rendered at.
    ap.add_argument("--commit", default=None)
    args = ap.parse_args()
    runs = load(args.figures)
    known = [c[0] for c in CATALOGUE]
    extra = [(s, "", "") for s in sorted(runs) if s not in known]

    out = []
    w = out.append
    w("# Reliability: the fault matrix, with figures")
    w("")
    w("Generated by `scripts/reliability.sh` from the figures the fault suite recorded "
      "(`GAP_AUDITOR_FIGURES`, one JSON line per scenario run, written by the tests "
      "themselves). Do not edit by hand: re-run the script. A scenario the run did not "
      "execute shows **not run**; no number here was typed in.")
    w("")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    result = "passed" if args.exit_code == 0 else f"**FAILED** (exit code {args.exit_code})"
    w(f"- Run: {when}, suite {result}"
      + (f", {args.seconds // 60} min {args.seconds % 60} s wall" if args.seconds is not None else ""))
    for k, v in machine():
        if k == "Commit" and args.commit:
            v = args.commit
        w(f"- {k}: {v}")
    w(f"- Reproduce: `{args.command}` (starts the test services when they are down; "
      "`GAP_AUDITOR_FAULT_SEED=<seed>` replays the random moments of a run, "
      "`GAP_AUDITOR_FAULT_RECORDS=<n>` resizes the kill -9 run)")
    w("")
    w("Lost records and gaps: the ground truth (what the pipeline stand-in really dropped) "
      "against what the auditor reported at the end. False positives: records reported "
      "lost that were not; false negatives: lost records not reported. Every scenario "
      "promises zeros in both, and expected == reported.")
    w("")
    w("| " + " | ".join(COLUMNS) + " |")
    w("|" + "|".join("---" for _ in COLUMNS) + "|")
    for scenario, item, _ in CATALOGUE + extra:
        w("| " + " | ".join(row(item, scenario, runs.get(scenario, []))) + " |")
    w("")
    w("Item 7 (every config validation rule has a test naming the key) is covered by the "
      "`config` unit tests (`cargo test --lib config`), which record no figures.")
    w("")
    w("## How the faults are injected")
    w("")
    for line in METHOD:
        w(line)
    w("")
    w("## What each scenario injects, and what it measured")
    w("")
    for scenario, item, what in CATALOGUE + extra:
        lines = runs.get(scenario, [])
        label = f"item {item}" if item.isdigit() else item
        w(f"### `{scenario}`" + (f" ({label})" if item else ""))
        w("")
        if what:
            w(what + ".")
            w("")
        if not lines:
            w("Not run.")
        for l in lines:
            w(f"- {l['notes']}")
        w("")
    with open(args.out, "w") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()
