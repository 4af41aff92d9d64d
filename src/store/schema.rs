//! The schema and its migrations: one SQL batch per version, applied in order by
//! [`Store::open`] inside one IMMEDIATE transaction.

use super::StoreError;
use crate::store::items::{ItemError, replace_items};
use rusqlite::{Connection, params};
use std::path::Path;

/// Schema version this binary writes (`PRAGMA user_version`).
pub(super) const SCHEMA_VERSION: i32 = 17;

pub(super) const SCHEMA_V1: &str = "
CREATE TABLE IF NOT EXISTS gaps (
    id               TEXT PRIMARY KEY NOT NULL,
    audit            TEXT NOT NULL,
    topic            TEXT NOT NULL,
    partition        INTEGER NOT NULL,
    first_offset     INTEGER NOT NULL,
    last_offset      INTEGER NOT NULL,
    missing_records  INTEGER NOT NULL,
    size_known       INTEGER NOT NULL,
    first_timestamp  TEXT,
    last_timestamp   TEXT,
    detected_at      TEXT NOT NULL,
    state            TEXT NOT NULL,
    unrecoverable_at TEXT,
    ack_reason       TEXT,
    updated_at       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS gaps_detected_at ON gaps (detected_at DESC);
CREATE INDEX IF NOT EXISTS gaps_audit_state ON gaps (audit, state);
CREATE TABLE IF NOT EXISTS progress (
    audit      TEXT NOT NULL,
    topic      TEXT NOT NULL,
    partition  INTEGER NOT NULL,
    settled    INTEGER NOT NULL,
    ledger     TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (audit, topic, partition)
) WITHOUT ROWID;
";

/// v2: why a gap happened (the pipeline commit step that passed over it).
pub(super) const SCHEMA_V2: &str = "
ALTER TABLE gaps ADD COLUMN cause TEXT NOT NULL DEFAULT 'unknown';
ALTER TABLE gaps ADD COLUMN pipeline_commit_from INTEGER;
ALTER TABLE gaps ADD COLUMN pipeline_commit_to INTEGER;
ALTER TABLE gaps ADD COLUMN pipeline_commit_at TEXT;
";

/// v3: when `gap-auditor replay` wrote a gap's records again, so that the daemon reports
/// the gap `repaired` (not merely `late`) once it confirms them.
pub(super) const SCHEMA_V3: &str = "
ALTER TABLE gaps ADD COLUMN replayed_at TEXT;
";

/// v4: whether a gap's key was shared by other records (key_columns multiset).
pub(super) const SCHEMA_V4: &str = "
ALTER TABLE gaps ADD COLUMN shared_key INTEGER NOT NULL DEFAULT 0;
";

/// v5: the key_columns multiset's confirmed counts, written with the settled offsets they
/// lie below, so a restart decides shared keys as the process before it would have.
pub(super) const SCHEMA_V5: &str = "
CREATE TABLE IF NOT EXISTS key_book (
    audit     TEXT NOT NULL,
    key       BLOB NOT NULL,
    confirmed INTEGER NOT NULL,
    PRIMARY KEY (audit, key)
) WITHOUT ROWID;
";

/// v6: a partition's missing runs and ledger gaps, one row each (`kind` 0: missing run, 1:
/// gap), so that a round writes what changed, not the whole ledger: under a systematic
/// loss the ledger holds hundreds of thousands of them. `progress.ledger` keeps the rest.
pub(super) const SCHEMA_V6: &str = "
CREATE TABLE IF NOT EXISTS ledger_items (
    audit     TEXT NOT NULL,
    topic     TEXT NOT NULL,
    partition INTEGER NOT NULL,
    kind      INTEGER NOT NULL,
    first     INTEGER NOT NULL,
    body      TEXT NOT NULL,
    PRIMARY KEY (audit, topic, partition, kind, first)
) WITHOUT ROWID;
";

/// v7: every acknowledgement in order, so the daemon reads only the new ones each round
/// (listing every acknowledged gap made a round's cost grow with all the acks ever given).
pub(super) const SCHEMA_V7: &str = "
CREATE TABLE IF NOT EXISTS ack_log (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    gap_id TEXT NOT NULL
);
";

/// v8: the key book as a log, appended to each round, instead of a table keyed by the key.
/// A round's confirmed keys are spread over the whole key space, so upserting them touched
/// one random page of the key tree each: a round of 10,000 keys into a million-key book
/// rewrote ~10,000 pages (tens of MB through the WAL, then again at the checkpoint), and a
/// quarter of the key_columns benchmark's round time went to that write. Appended, they fill
/// new pages in order. The last row of a key holds its count (0: forgotten); the daemon
/// rewrites the log from its book when dead rows outgrow the live ones
/// ([`crate::ledger::KeyBook::claims_to_write`]).
pub(super) const SCHEMA_V8: &str = "
CREATE TABLE IF NOT EXISTS key_log (
    audit     TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    key       BLOB NOT NULL,
    confirmed INTEGER NOT NULL,
    PRIMARY KEY (audit, seq)
) WITHOUT ROWID;
INSERT INTO key_log (audit, seq, key, confirmed)
    SELECT audit, ROW_NUMBER() OVER (PARTITION BY audit ORDER BY key), key, confirmed
    FROM key_book;
DROP TABLE key_book;
";

/// v9: the key book's log packed, up to 4,096 claims a row (the encoding: key_chunk.rs),
/// after the v8 `key_log` rows, which stay and are read first: no data moves, and an
/// audit's first whole write of its book empties them. A row per claim cost 0.6-0.8 µs a
/// claim (1 M claims of 47 bytes, release build), three quarters of it SQLite's work per
/// row, while the sink idled; packed, 0.2-0.35 µs, most of it writing and syncing the bytes
/// (0.12 µs on tmpfs). A rowid table: SQLite advises WITHOUT ROWID only for rows under about
/// a twentieth of a page, and a chunk spans dozens of pages.
pub(super) const SCHEMA_V9: &str = "
CREATE TABLE IF NOT EXISTS key_chunks (
    audit  TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    claims BLOB NOT NULL,
    PRIMARY KEY (audit, seq)
);
";

/// v10: every `gap-auditor replay` (and the demo's), one row each, in order: what was asked
/// (gap or offsets, destination, dry run, `--force`) and what came of it (per-offset outcome
/// counts, or the error). `gaps.replayed_at` keeps deciding `repaired`; this log says when
/// and where a gap was replayed, which a second replay quotes when it refuses.
pub(super) const SCHEMA_V10: &str = "
CREATE TABLE IF NOT EXISTS replays (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    at           TEXT NOT NULL,
    gap_id       TEXT,
    audit        TEXT NOT NULL,
    topic        TEXT NOT NULL,
    partition    INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    last_offset  INTEGER NOT NULL,
    to_topic     TEXT,
    dry_run      INTEGER NOT NULL,
    forced       INTEGER NOT NULL,
    written      INTEGER NOT NULL,
    present      INTEGER NOT NULL,
    filtered     INTEGER NOT NULL,
    failed       INTEGER NOT NULL,
    partial      INTEGER NOT NULL,
    error        TEXT
);
CREATE INDEX IF NOT EXISTS replays_gap ON replays (gap_id, seq);
";

/// v11: the gap listing's order (`/api/gaps`: newest detected first, ties by id) as one
/// index, so that a page (`limit`, `after`) and each page of a streamed whole listing is a
/// seek plus `limit` index steps, never a sort of every gap or an OFFSET scan. `state` and
/// `audit` ride in it so the listing's filters skip rows without reading them. It has the
/// v1 `gaps_detected_at` index as its prefix, which it replaces (one index less to keep up
/// at every gap write).
pub(super) const SCHEMA_V11: &str = "
CREATE INDEX IF NOT EXISTS gaps_listing ON gaps (detected_at DESC, id, state, audit);
DROP INDEX IF EXISTS gaps_detected_at;
";

/// v12: gaps that left the daemon's memory (issue 41 item 1: every missing run of theirs
/// given up, so no verdict changes them again) are marked `retired`: their rows are final,
/// and the ledger keeps only an aggregate of them, counted from these rows in one query
/// (`retired.rs`) at assignment and after a change only the store can make (the log start
/// passing them, an acknowledgement).
/// The column itself is added by [`migrate`] unless the file has it already (a file taken
/// back to an older `user_version` by hand keeps its columns).
pub(super) const SCHEMA_V12: &str = "
CREATE INDEX IF NOT EXISTS gaps_retired ON gaps (audit, topic, partition, first_offset)
    WHERE retired = 1;
";

/// v13: the key book's stand-in credits (key_columns with a dead-letter topic: a record
/// the topic names but the book confirmed lends its row to the key's next absent record,
/// `KeyBook::credit`), one row per key holding any: rare, so upserted, not logged. Kept
/// across a restart so that the stand-in decided after it is not reported lost.
pub(super) const SCHEMA_V13: &str = "
CREATE TABLE IF NOT EXISTS key_credits (
    audit   TEXT NOT NULL,
    key     BLOB NOT NULL,
    credits INTEGER NOT NULL,
    PRIMARY KEY (audit, key)
) WITHOUT ROWID;
";

/// v14: the partitions whose retired gaps are on a handover topic's side topic as this
/// store holds them (`handover::retired`): swept there, or imported from there. An
/// instance assigned such a partition does not publish them all again; any other
/// partition is swept once (an upgrade from record format 2, a format-2 takeover, another
/// handover topic). `handover_unpublished`: the side-topic chunks of a partition whose gaps
/// a store write retired (or acknowledged) and whose publish was not acknowledged yet,
/// noted before that write: a crash in between republishes those chunks at the next
/// assignment instead of sweeping the whole partition (review item 9). `instance`: this
/// store's id, made at its first use (`Store::instance_id`): the handover owner survives a
/// restart, so an instance taking back its own state does not import it again. Every
/// statement is
/// `IF NOT EXISTS`, and `key_credits` is created here
/// too: a file written by the build that briefly numbered these the other way round
/// (`handover_swept` v13, `key_credits` v14) may be at v13 without `key_credits`.
/// Acknowledged gaps' rows are marked retired (they left the ledger's memory; as given-up
/// gaps they travel on the side topic, not inline in every handover base: review item 7);
/// an UPDATE of rows not marked yet, so running it twice changes nothing.
pub(super) const SCHEMA_V14: &str = "
UPDATE gaps SET retired = 1 WHERE state = 'acknowledged' AND retired = 0;
CREATE TABLE IF NOT EXISTS handover_swept (
    handover_topic TEXT NOT NULL,
    audit          TEXT NOT NULL,
    topic          TEXT NOT NULL,
    partition      INTEGER NOT NULL,
    at             TEXT NOT NULL,
    PRIMARY KEY (handover_topic, audit, topic, partition)
);
CREATE TABLE IF NOT EXISTS key_credits (
    audit   TEXT NOT NULL,
    key     BLOB NOT NULL,
    credits INTEGER NOT NULL,
    PRIMARY KEY (audit, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS instance (
    id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS handover_unpublished (
    handover_topic TEXT NOT NULL,
    audit          TEXT NOT NULL,
    topic          TEXT NOT NULL,
    partition      INTEGER NOT NULL,
    chunk          INTEGER NOT NULL,
    PRIMARY KEY (handover_topic, audit, topic, partition, chunk)
) WITHOUT ROWID;
";

/// v15: a swept mark says under which ownership term the side topic holds the partition's
/// given-up gaps as the store does (chunk keys carry the writer's term). The marks are a
/// cache (a partition without one is swept once more): the table is made again, with the
/// column, whatever an earlier build left (the reverted build's v13 had none).
///
/// Also v15: which partitions import another owner's state (its owner and term) and have
/// not finished: such a partition's progress, further than that state, is never taken for
/// a store further than the handover (its given-up gaps are not all in the store yet): the
/// import resumes.
///
/// And v15: the highest ownership term this instance used per partition (chunk keys are
/// this instance's under it: a later ownership must take a higher one).
const SWEPT_WITH_TERMS: &str = "
CREATE TABLE IF NOT EXISTS handover_terms (
    handover_topic TEXT NOT NULL,
    audit          TEXT NOT NULL,
    topic          TEXT NOT NULL,
    partition      INTEGER NOT NULL,
    term           INTEGER NOT NULL,
    PRIMARY KEY (handover_topic, audit, topic, partition)
);
CREATE TABLE IF NOT EXISTS handover_importing (
    handover_topic TEXT NOT NULL,
    audit          TEXT NOT NULL,
    topic          TEXT NOT NULL,
    partition      INTEGER NOT NULL,
    owner          TEXT NOT NULL,
    term           INTEGER NOT NULL,
    PRIMARY KEY (handover_topic, audit, topic, partition)
);
DROP TABLE IF EXISTS handover_swept;
CREATE TABLE handover_swept (
    handover_topic TEXT NOT NULL,
    audit          TEXT NOT NULL,
    topic          TEXT NOT NULL,
    partition      INTEGER NOT NULL,
    at             TEXT NOT NULL,
    term           INTEGER NOT NULL,
    PRIMARY KEY (handover_topic, audit, topic, partition)
);
";

/// v16: an import's mark names the very state it began from (its generation) and where
/// that state was settled: a cut import resumes over the store's progress from that state
/// only, and from a newer one only with the gaps below that offset this store knows
/// nothing of (review of format 3 and review 26: N2, T2, F2). NULL in marks of v15. The
/// columns are added by [`add_import_mark_columns`] (a file taken back to an older version
/// and opened again runs v15's batch, whose table may have them already).
///
/// Also v16: which gaps of a partition under an import mark this store folded into an
/// overflow gap (their rows went; a newer state's version of them is not taken), and which
/// a resume from a newer state wrote (its later versions are): review 26b, G1 and G2.
const SCHEMA_V16: &str = "
CREATE TABLE IF NOT EXISTS handover_resumed (
    handover_topic TEXT NOT NULL,
    audit          TEXT NOT NULL,
    topic          TEXT NOT NULL,
    partition      INTEGER NOT NULL,
    id             TEXT NOT NULL,
    folded         INTEGER NOT NULL,
    PRIMARY KEY (handover_topic, audit, topic, partition, id)
) WITHOUT ROWID;
";

/// v16: `handover_importing.below` and `.generation`, when the table does not have them.
fn add_import_mark_columns(tx: &Connection) -> rusqlite::Result<()> {
    for (column, decl) in [("below", "INTEGER"), ("generation", "INTEGER")] {
        let has: bool = tx.query_row(
            "SELECT COUNT(*) > 0 FROM pragma_table_info('handover_importing') WHERE name = ?1",
            [column],
            |r| r.get(0),
        )?;
        if !has {
            tx.execute_batch(&format!(
                "ALTER TABLE handover_importing ADD COLUMN {column} {decl};"
            ))?;
        }
    }
    Ok(())
}

/// v17: what an evidence source told of a gap's cause (`gaps.evidence`, Flink's restore
/// evidence: src/evidence/flink). Added by [`add_evidence_column`], which checks first, so
/// that the step is idempotent like the others (a file migrated by a build that crashed
/// before writing `user_version` runs it again).
const SCHEMA_V17: &str = "";

/// Each version's SQL batch with what its failure says, in order: `MIGRATIONS[i]` takes a
/// file from version `i` to `i + 1`. Future migrations: one more entry (and `SCHEMA_VERSION`).
const MIGRATIONS: [(&str, &str); SCHEMA_VERSION as usize] = [
    (SCHEMA_V1, "create schema v1"),
    (SCHEMA_V2, "migrate schema to v2"),
    (SCHEMA_V3, "migrate schema to v3"),
    (SCHEMA_V4, "migrate schema to v4"),
    (SCHEMA_V5, "migrate schema to v5"),
    (SCHEMA_V6, "migrate schema to v6"),
    (SCHEMA_V7, "migrate schema to v7"),
    (SCHEMA_V8, "migrate schema to v8"),
    (SCHEMA_V9, "migrate schema to v9"),
    (SCHEMA_V10, "migrate schema to v10"),
    (SCHEMA_V11, "migrate schema to v11"),
    (SCHEMA_V12, "migrate schema to v12"),
    (SCHEMA_V13, "migrate schema to v13"),
    (SCHEMA_V14, "migrate schema to v14"),
    // A file at v14 may come from the build that was merged and reverted, whose v14 was
    // `key_credits` alone: v14's batch is idempotent, so it runs once more (its tables
    // created if absent, acknowledged rows not marked yet marked), then the swept marks
    // get their term (`SWEPT_WITH_TERMS`). Once: it used to run at every open, a full scan
    // of the gaps in a write transaction (review of format 3, F9).
    (SCHEMA_V14, "complete schema v14 (v15)"),
    (SCHEMA_V16, "migrate schema to v16"),
    (SCHEMA_V17, "migrate schema to v17"),
];

/// Takes the file at `path` from schema `version` to [`SCHEMA_VERSION`] inside `tx` (the
/// caller writes `user_version` and commits).
pub(super) fn migrate(tx: &Connection, path: &Path, version: i32) -> Result<(), StoreError> {
    // One step's SQLite error, under what the step was doing.
    let failed = |context: &str| {
        let context = context.to_string();
        move |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            context,
            source,
        }
    };
    for (to, (sql, context)) in (1..).zip(MIGRATIONS) {
        if version >= to {
            continue;
        }
        if to == 17 {
            add_evidence_column(tx).map_err(failed(context))?;
            // A file written by a build of the Flink branch before it was merged has
            // user_version 16 meaning "evidence", without the handover's v16: both steps
            // of v16 are idempotent, so they run here again (review 37, F12).
            tx.execute_batch(SCHEMA_V16)
                .and_then(|()| add_import_mark_columns(tx))
                .map_err(failed(context))?;
        }
        if to == 12 {
            add_retired_column(tx).map_err(failed(context))?;
        }
        tx.execute_batch(sql).map_err(failed(context))?;
        if to == 15 {
            tx.execute_batch(SWEPT_WITH_TERMS)
                .map_err(failed("give the swept marks their term (v15)"))?;
        }
        if to == 16 {
            add_import_mark_columns(tx).map_err(failed(context))?;
        }
        if to == 12 {
            // Ledgers stored before v12 hold every given-up gap: retired here, so the first
            // start of this version does not load them all back.
            tx.execute_batch(RETIRE_STORED_GAPS)
                .map_err(failed("retire the given-up gaps of stored ledgers"))?;
        }
        if to == 6 {
            // v6 also moves the items out of every stored ledger's JSON.
            migrate_items(tx).map_err(|e| {
                e.into_store(path, "migrate ledgers to ledger_items".to_string(), "")
            })?;
        }
    }
    Ok(())
}

/// v12: the stored ledgers' gaps that the ledger would retire at once (`retired.rs`): with
/// records missing, no missing run left, not the tail gap, not a deleted range awaiting
/// settlement, not an overflow gap. Their rows are marked retired, then their ledger items
/// go: only those whose row is there and marked, so no gap is left in neither place.
const RETIRE_STORED_GAPS: &str = "
CREATE TEMP TABLE retiring AS
    SELECT g.audit, g.topic, g.partition, g.first,
        g.audit || ':' || g.topic || ':' || g.partition || ':' || g.first
            || CASE WHEN COALESCE(json_extract(g.body, '$.epoch'), 0) > 0
                    THEN '@' || json_extract(g.body, '$.epoch') ELSE '' END AS id
    FROM ledger_items g JOIN progress p
        ON p.audit = g.audit AND p.topic = g.topic AND p.partition = g.partition
    WHERE g.kind = 1 AND json_valid(g.body) AND json_valid(p.ledger)
      AND json_extract(g.body, '$.missing') > 0
      AND COALESCE(json_extract(g.body, '$.unsettled'), 0) = 0
      AND COALESCE(json_extract(g.body, '$.cause'), '') <> 'folded'
      AND g.first IS NOT COALESCE(json_extract(p.ledger, '$.tail_gap'), 'none')
      AND NOT EXISTS (
          SELECT 1 FROM ledger_items m
          WHERE m.audit = g.audit AND m.topic = g.topic AND m.partition = g.partition
            AND m.kind = 0 AND json_valid(m.body)
            AND json_extract(m.body, '$.gap') = g.first);
UPDATE gaps SET retired = 1 WHERE id IN (SELECT id FROM retiring);
DELETE FROM ledger_items
    WHERE kind = 1 AND EXISTS (
        SELECT 1 FROM retiring r JOIN gaps x ON x.id = r.id AND x.retired = 1
        WHERE r.audit = ledger_items.audit AND r.topic = ledger_items.topic
          AND r.partition = ledger_items.partition AND r.first = ledger_items.first);
DROP TABLE retiring;
";

/// v12: `gaps.retired`, when the table does not have it yet.
fn add_retired_column(tx: &Connection) -> rusqlite::Result<()> {
    let has: bool = tx.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('gaps') WHERE name = 'retired'",
        [],
        |r| r.get(0),
    )?;
    if !has {
        tx.execute_batch("ALTER TABLE gaps ADD COLUMN retired INTEGER NOT NULL DEFAULT 0;")?;
    }
    Ok(())
}

/// v17: `gaps.evidence`, when the table does not have it yet.
fn add_evidence_column(tx: &Connection) -> rusqlite::Result<()> {
    let has: bool = tx.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('gaps') WHERE name = 'evidence'",
        [],
        |r| r.get(0),
    )?;
    if !has {
        tx.execute_batch("ALTER TABLE gaps ADD COLUMN evidence TEXT;")?;
    }
    Ok(())
}

/// v6: moves the `missing` and `gaps` arrays of every stored ledger into `ledger_items`.
fn migrate_items(tx: &Connection) -> Result<(), ItemError> {
    let rows: Vec<(String, String, i32, String)> = tx
        .prepare("SELECT audit, topic, partition, ledger FROM progress")?
        .query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })?
        .collect::<Result<_, _>>()?;
    for (audit, topic, partition, ledger) in rows {
        let mut head: serde_json::Value = serde_json::from_str(&ledger).map_err(|e| {
            ItemError::Shape(format!(
                "ledger of {audit}/{topic}-{partition} is not JSON: {e}"
            ))
        })?;
        replace_items(tx, &audit, &topic, partition, &mut head)?;
        tx.execute(
            "UPDATE progress SET ledger = ?4 WHERE audit = ?1 AND topic = ?2 AND partition = ?3",
            params![audit, topic, partition, head.to_string()],
        )?;
    }
    Ok(())
}
