use super::*;
use proptest::prelude::*;

fn encode(claims: &[(Vec<u8>, u64)]) -> Vec<u8> {
    let mut chunk = Vec::new();
    for (k, n) in claims {
        push_claim(&mut chunk, k, *n);
    }
    chunk
}

fn decode(chunk: &[u8]) -> Result<Vec<(Vec<u8>, u64)>, ChunkError> {
    claims(chunk)
        .map(|c| c.map(|(k, n)| (k.to_vec(), n)))
        .collect()
}

/// The documented bytes: LEB128 lengths and counts around the raw key.
#[test]
fn a_chunk_is_length_key_count_back_to_back() {
    let chunk = encode(&[(b"a\xff".to_vec(), 1), (Vec::new(), 300), (vec![7; 130], 0)]);
    let mut want = vec![0x02, b'a', 0xff, 0x01, 0x00, 0xac, 0x02, 0x82, 0x01];
    want.extend([7; 130]);
    want.push(0x00);
    assert_eq!(chunk, want);
    assert_eq!(
        decode(&chunk).unwrap(),
        vec![(b"a\xff".to_vec(), 1), (Vec::new(), 300), (vec![7; 130], 0)]
    );
    assert_eq!(decode(&[]).unwrap(), vec![]);
}

#[test]
fn varints_reach_the_u64_limit_and_no_further() {
    for n in [
        0,
        1,
        127,
        128,
        16_383,
        16_384,
        u64::from(u32::MAX),
        u64::MAX - 1,
        u64::MAX,
    ] {
        let chunk = encode(&[(b"k".to_vec(), n)]);
        assert_eq!(decode(&chunk).unwrap(), vec![(b"k".to_vec(), n)], "{n}");
    }
    assert_eq!(encode(&[(Vec::new(), u64::MAX)]).len(), 11, "1 + 10 bytes");
    // Eleven bytes, or a tenth byte above 1: more than 64 bits.
    let mut eleven = vec![0x00];
    eleven.extend([0x80; 10]);
    eleven.push(0x00);
    assert_eq!(decode(&eleven), Err(ChunkError::Overlong { at: 1 }));
    let mut tenth = vec![0x00];
    tenth.extend([0xff; 9]);
    tenth.push(0x02);
    assert_eq!(decode(&tenth), Err(ChunkError::Overlong { at: 1 }));
}

#[test]
fn a_truncated_chunk_is_an_error_naming_the_claim() {
    let chunk = encode(&[(b"first".to_vec(), 2), (b"second".to_vec(), 300)]);
    // Byte 7 starts the second claim: every cut inside it fails there, a cut at its start
    // is a shorter chunk.
    assert_eq!(decode(&chunk[..7]).unwrap(), vec![(b"first".to_vec(), 2)]);
    for cut in 8..chunk.len() {
        assert_eq!(
            decode(&chunk[..cut]),
            Err(ChunkError::Truncated { at: 7, len: cut }),
            "cut at {cut}"
        );
    }
    // A key length past the end, even one far past any allocation.
    let huge = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, b'x',
    ];
    assert_eq!(decode(&huge), Err(ChunkError::Truncated { at: 0, len: 11 }));
}

#[test]
fn the_claims_end_after_an_error() {
    let mut it = claims(&[0x05, b'a']);
    assert!(matches!(it.next(), Some(Err(ChunkError::Truncated { .. }))));
    assert!(it.next().is_none());
}

proptest! {
    #![proptest_config(crate::test_seed::config())]
    #[test]
    fn claims_round_trip(
        c in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..300), any::<u64>()),
            0..40,
        )
    ) {
        prop_assert_eq!(decode(&encode(&c)).unwrap(), c);
    }

    /// Any bytes decode to claims or to an error, never a panic; what decodes re-encodes to
    /// the same bytes unless a varint had needless trailing zero groups.
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(c) = decode(&bytes) {
            prop_assert!(encode(&c).len() <= bytes.len());
        }
    }

    /// Every cut of a valid chunk decodes to a prefix of its claims or fails at the claim
    /// it cuts.
    #[test]
    fn every_cut_is_a_prefix_or_an_error(
        c in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..20), any::<u64>()),
            1..10,
        ),
        cut in any::<proptest::sample::Index>(),
    ) {
        let chunk = encode(&c);
        let cut = cut.index(chunk.len());
        match decode(&chunk[..cut]) {
            Ok(got) => {
                prop_assert_eq!(&got[..], &c[..got.len()]);
                prop_assert_eq!(encode(&got).len(), cut);
            }
            Err(ChunkError::Truncated { at, len }) => {
                prop_assert_eq!(len, cut);
                prop_assert!(at < cut);
                prop_assert!(decode(&chunk[..at]).is_ok());
            }
            Err(e) => prop_assert!(false, "{e}"),
        }
    }
}

fn packed(claims: &[(Vec<u8>, u64)], max_claims: usize, max_bytes: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    pack(
        claims.iter().map(|(k, n)| (k.as_slice(), *n)),
        max_claims,
        max_bytes,
        |c| {
            out.push(c.to_vec());
            Ok::<(), ()>(())
        },
    )
    .unwrap();
    out
}

#[test]
fn pack_closes_chunks_at_either_limit() {
    let c: Vec<(Vec<u8>, u64)> = (0..10u8).map(|i| (vec![i; 3], u64::from(i))).collect();
    assert!(packed(&[], 4, 1000).is_empty(), "no claims, no chunk");
    let by_count = packed(&c, 4, 1000);
    assert_eq!(by_count.len(), 3);
    assert_eq!(decode(&by_count[2]).unwrap(), c[8..].to_vec());
    // Each claim is 5 bytes: a chunk closes at the claim that reaches 12 bytes (the third).
    let by_bytes = packed(&c, 100, 12);
    assert_eq!(
        by_bytes.iter().map(Vec::len).collect::<Vec<_>>(),
        [15, 15, 15, 5]
    );
    let big = vec![(vec![1; 50], 1), (b"k".to_vec(), 2)];
    assert_eq!(
        packed(&big, 100, 12).len(),
        2,
        "an oversized claim gets its own chunk"
    );
}

proptest! {
    #![proptest_config(crate::test_seed::config())]
    /// The chunks hold the claims in order, none over either limit by more than its last
    /// claim.
    #[test]
    fn pack_splits_without_losing_or_reordering(
        c in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..30), any::<u64>()),
            0..60,
        ),
        max_claims in 1usize..10,
        max_bytes in 1usize..200,
    ) {
        let chunks = packed(&c, max_claims, max_bytes);
        let mut back = Vec::new();
        for chunk in &chunks {
            let got = decode(chunk).unwrap();
            prop_assert!(!got.is_empty() && got.len() <= max_claims);
            let last = encode(&got[got.len() - 1..]).len();
            prop_assert!(chunk.len() - last < max_bytes, "closed once it reached max_bytes");
            back.extend(got);
        }
        prop_assert_eq!(back, c);
    }
}
