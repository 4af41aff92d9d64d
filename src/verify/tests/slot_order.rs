//! `by_keys` against the rule it documents, on arbitrary segments: per key, its records in
//! the order given (segment by segment, offset by offset) take the key's rows first come,
//! first served; the LAST ones are missing, marked shared when the key has several records;
//! a key's extra rows are charged once, to the segment of its first record.

use super::*;

proptest! {
    #![proptest_config(crate::test_seed::config())]
    #[test]
    fn records_of_a_key_take_its_rows_in_the_order_given(
        segs in prop::collection::vec(prop::collection::vec(0u8..6, 1..12), 1..6),
        rows in prop::collection::vec(0u64..5, 6),
        batch in 1usize..4,
    ) {
        let key = |i: u8| Key::new([format!("k{i}")]);
        let sink = MemorySink::new();
        for (i, n) in rows.iter().enumerate() {
            for _ in 0..*n {
                sink.insert_key(&key(i as u8));
            }
        }
        let mut first = 0;
        let segments: Vec<Segment> = segs
            .iter()
            .map(|ks| {
                let s = Segment {
                    run: OffsetRun::new(first, first + ks.len() as Offset - 1),
                    keys: ks.iter().map(|&k| key(k)).collect(),
                    max_ts: None,
                };
                first += ks.len() as Offset + 3;
                s
            })
            .collect();
        // The rule, record by record.
        let mut order: Vec<Vec<(usize, Offset)>> = vec![Vec::new(); 6];
        for (si, (s, ks)) in segments.iter().zip(&segs).enumerate() {
            for (i, &k) in ks.iter().enumerate() {
                order[usize::from(k)].push((si, s.run.first + i as Offset));
            }
        }
        let mut want_present: Vec<Vec<Offset>> = vec![Vec::new(); segments.len()];
        let mut want_shared: Vec<Vec<Offset>> = vec![Vec::new(); segments.len()];
        let mut want_dups: Vec<u64> = vec![0; segments.len()];
        for (k, slots) in order.iter().enumerate() {
            let m = slots.len() as u64;
            let found = rows[k].min(m);
            for (i, &(si, o)) in slots.iter().enumerate() {
                if (i as u64) < found {
                    want_present[si].push(o);
                } else if m > 1 {
                    want_shared[si].push(o);
                }
            }
            if let Some(&(si, _)) = slots.first() {
                want_dups[si] += rows[k].saturating_sub(m);
            }
        }
        let mut book = KeyBook::new(100);
        pended(&mut book, &segments);
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("rt");
        let v = rt
            .block_on(by_keys(
                &sink,
                &segments,
                &mut book,
                KeyRound::Due,
                Limits::from_batch_size(batch),
                &|_, _| {},
            ))
            .expect("ok");
        let runs = |r: &[OffsetRun]| -> Vec<Offset> {
            r.iter().flat_map(|r| r.first..=r.last).collect()
        };
        for (si, v) in v.iter().enumerate() {
            let Verdict::Known { present, duplicate_rows, shared_keys, .. } = v else {
                return Err(TestCaseError::fail("unknown verdict"));
            };
            want_present[si].sort_unstable();
            want_shared[si].sort_unstable();
            prop_assert_eq!(runs(present), want_present[si].clone(), "segment {} present", si);
            prop_assert_eq!(runs(shared_keys), want_shared[si].clone(), "segment {} shared", si);
            prop_assert_eq!(*duplicate_rows, want_dups[si], "segment {} duplicates", si);
        }
    }
}
