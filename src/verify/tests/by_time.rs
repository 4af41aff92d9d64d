//! Due keys counted from reads by time (`time_scan`, issue 40): the verdicts are the key
//! count's, and a second holding more rows than the audit read goes by key.

use super::super::*;
use super::present_of as present;
use crate::sink::memory::MemorySink;
use crate::time_scan::{TimeColumn, TimeUnit};

fn column() -> TimeColumn {
    TimeColumn {
        index: 1,
        name: "time".into(),
        unit: TimeUnit::Second,
        typed: vec![1],
    }
}

fn key(i: u32, second: u32) -> Key {
    Key::new([format!("k{i}"), format!("2024-05-01 12:00:{second:02}")])
}

fn seg(first: Offset, keys: Vec<Key>) -> Segment {
    Segment {
        run: OffsetRun::new(first, first + keys.len() as Offset - 1),
        keys,
        max_ts: None,
    }
}

fn checker(keys: &[Key]) -> Checker {
    let mut c = Checker::new(MatchStrategy::KeyColumns, 100, 1_000);
    let book = c.book_mut().expect("key book");
    book.set_time_column(Some(column()), 1_000);
    for k in keys {
        book.pend(k);
    }
    c
}

#[tokio::test]
async fn a_read_by_time_decides_as_the_key_count() {
    // Seconds 0..5, four records each; record 6 lost, record 9 written twice.
    let keys: Vec<Key> = (0..20).map(|i| key(i, i / 4)).collect();
    let sink = MemorySink::new();
    sink.read_by_time(column());
    for (i, k) in keys.iter().enumerate() {
        let copies = match i {
            6 => 0,
            9 => 2,
            _ => 1,
        };
        for _ in 0..copies {
            sink.insert_key(k);
        }
    }
    let mut c = checker(&keys);
    let v = c
        .due(
            &sink,
            &TopicPartition::new("t", 0),
            &[seg(0, keys.clone())],
            &|_, _| {},
        )
        .await
        .expect("answered");
    let want: Vec<Offset> = (0..20).filter(|&o| o != 6).collect();
    assert_eq!(present(&v), want);
    assert!(sink.time_reads() > 0, "the keys were read by time");
    let book = c.book_mut().expect("book");
    assert_eq!(book.take_counted(), (20, 0));
}

#[tokio::test]
async fn a_second_crowded_beyond_the_audits_records_goes_by_key() {
    let keys: Vec<Key> = (0..4).map(|i| key(i, 0)).collect();
    let sink = MemorySink::new();
    sink.read_by_time(column());
    for k in &keys[..3] {
        sink.insert_key(k);
    }
    // Another writer's rows in the same second, beyond the read's limit.
    for i in 100..1_200 {
        sink.insert_key(&key(i, 0));
    }
    let mut c = checker(&keys);
    let tp = TopicPartition::new("t", 0);
    let v = c
        .due(&sink, &tp, &[seg(0, keys[..2].to_vec())], &|_, _| {})
        .await
        .expect("answered");
    assert_eq!(present(&v), vec![0, 1]);
    assert_eq!(sink.time_reads(), 1, "one read, over its limit");
    assert_eq!(c.book_mut().expect("book").take_counted(), (0, 2));
    // The second is now known to be crowded: no read is tried again.
    let v = c
        .due(&sink, &tp, &[seg(2, keys[2..].to_vec())], &|_, _| {})
        .await
        .expect("answered");
    assert_eq!(present(&v), vec![2]);
    assert_eq!(sink.time_reads(), 1);
    assert_eq!(c.book_mut().expect("book").take_counted(), (0, 2));
}

#[tokio::test]
async fn a_read_that_fails_is_unknown_and_its_seconds_go_by_key_next() {
    let keys: Vec<Key> = (0..4).map(|i| key(i, 0)).collect();
    let sink = MemorySink::new();
    sink.read_by_time(column());
    for k in &keys {
        sink.insert_key(k);
    }
    let mut c = checker(&keys);
    let tp = TopicPartition::new("t", 0);
    sink.fail_time_reads(true);
    let segs = [seg(0, keys.clone())];
    assert!(
        c.due(&sink, &tp, &segs, &|_, _| {}).await.is_err(),
        "a failed read is an unknown round, never a verdict"
    );
    // The same question again: no read this time, the keys are counted by key.
    let v = c
        .due(&sink, &tp, &segs, &|_, _| {})
        .await
        .expect("answered");
    assert_eq!(present(&v), vec![0, 1, 2, 3]);
    assert_eq!(c.book_mut().expect("book").take_counted(), (0, 4));
}

/// Review 40b: a round reads its due seconds first; a re-check later in the round that sees
/// more rows (a late row landed since the read) must be what the due decisions after it
/// see, or the book gives the row the read did not see to the missing record and calls the
/// due one lost.
#[tokio::test]
async fn a_recheck_that_sees_more_rows_than_the_rounds_read_is_what_later_decisions_see() {
    let k = key(1, 0);
    let sink = MemorySink::new();
    sink.read_by_time(column());
    // Two records of one key: r0 on t-0, r1 on t-1.
    let mut c = checker(&[k.clone(), k.clone()]);
    let (t0, t1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let only = |first| [seg(first, vec![k.clone()])];
    // Round 1: r0 is due and has no row: missing.
    c.prefetch_due(&sink, &[(t0.clone(), only(0).to_vec())], &|_, _| {})
        .await
        .expect("read");
    let v = c
        .due(&sink, &t0, &only(0), &|_, _| {})
        .await
        .expect("answered");
    assert!(present(&v).is_empty());
    c.end_round();
    // r1's row lands; round 2 reads it (one row); then r0's row lands.
    sink.insert_key(&k);
    c.prefetch_due(&sink, &[(t1.clone(), only(0).to_vec())], &|_, _| {})
        .await
        .expect("read");
    sink.insert_key(&k);
    // t-0's re-check counts afresh: two rows, r0 is late.
    let v = c
        .recheck(&sink, &t0, &only(0), &|_, _| {})
        .await
        .expect("answered");
    assert_eq!(present(&v), vec![0]);
    // t-1's due record sees the fresher count: confirmed, not lost.
    let v = c
        .due(&sink, &t1, &only(0), &|_, _| {})
        .await
        .expect("answered");
    assert_eq!(present(&v), vec![0], "r1's row is in the sink");
    c.end_round();
}

/// A round's first read prepares each partition's question: a key due on two partitions
/// is asked at both places of one read, and each place gets the key's rows. With two rows
/// both records are found, from that one read, and no partition reads or counts again.
/// (A sink that gave a repeated key's rows to its first place only left the second
/// partition's record lost.)
#[tokio::test]
async fn a_key_due_on_two_partitions_is_counted_for_both_by_the_rounds_read() {
    let k = key(1, 0);
    let other = key(2, 0);
    let sink = MemorySink::new();
    sink.read_by_time(column());
    sink.insert_key(&k);
    sink.insert_key(&k);
    sink.insert_key(&other);
    // r0 (k) and r1 (other) on t-0, r2 (k) on t-1.
    let mut c = checker(&[k.clone(), other.clone(), k.clone()]);
    let (t0, t1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let s0 = [seg(0, vec![k.clone(), other.clone()])];
    let s1 = [seg(0, vec![k.clone()])];
    c.prefetch_due(
        &sink,
        &[(t0.clone(), s0.to_vec()), (t1.clone(), s1.to_vec())],
        &|_, _| {},
    )
    .await
    .expect("read");
    assert_eq!(sink.time_reads(), 1, "one read for both partitions");
    let v0 = c.due(&sink, &t0, &s0, &|_, _| {}).await.expect("answered");
    let v1 = c.due(&sink, &t1, &s1, &|_, _| {}).await.expect("answered");
    assert_eq!(present(&v0), vec![0, 1]);
    assert_eq!(
        present(&v1),
        vec![0],
        "the second place of k has its rows too"
    );
    assert_eq!(sink.time_reads(), 1, "the partitions read nothing again");
    assert_eq!(c.book_mut().expect("book").take_counted(), (3, 0));
    c.end_round();
}

/// A partition whose due records changed after the round's first read (records given up
/// in between) does not take the question prepared for the old ones: it asks its own, and
/// its verdict is about the records it asks about.
#[tokio::test]
async fn a_question_about_other_records_than_the_reads_asks_afresh() {
    let keys: Vec<Key> = (0..3).map(|i| key(i, 0)).collect();
    let sink = MemorySink::new();
    sink.read_by_time(column());
    for k in &keys[1..] {
        sink.insert_key(k);
    }
    let mut c = checker(&keys);
    let tp = TopicPartition::new("t", 0);
    c.prefetch_due(
        &sink,
        &[(tp.clone(), vec![seg(0, keys.clone())])],
        &|_, _| {},
    )
    .await
    .expect("read");
    // Record 0 was given up: the partition asks about 1..=2 only.
    let v = c
        .due(&sink, &tp, &[seg(1, keys[1..].to_vec())], &|_, _| {})
        .await
        .expect("answered");
    assert_eq!(present(&v), vec![1, 2]);
    assert_eq!(sink.time_reads(), 2, "the partition read its own seconds");
    c.end_round();
}
