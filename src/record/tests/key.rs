//! The packed match key: values kept apart and the serde round trip.

use super::*;

fn values_of<'a>(v: &'a [&'a str]) -> impl Iterator<Item = Option<Cow<'a, str>>> {
    v.iter().map(|s| Some(Cow::Borrowed(*s)))
}

#[test]
fn key_keeps_values_apart() {
    let cases: [&[&str]; 6] = [
        &[],
        &[""],
        &["", ""],
        &["a", "b"],
        &["ab"],
        &["\0", "\u{7f}|é😀", ""],
    ];
    for values in cases {
        let key = Key::new(values);
        assert_eq!(key.to_vec(), values, "{values:?}");
        assert_eq!(key.len(), values.len());
        assert_eq!(key.values().len(), values.len());
        assert_eq!(key.is_empty(), values.is_empty());
        assert_eq!(key.first(), values.first().copied());
        assert_eq!(
            key.text_len(),
            values.iter().map(|v| v.len()).sum::<usize>()
        );
        let empty = values.iter().filter(|v| v.is_empty()).count();
        assert_eq!(key.value_counts(), (values.len(), empty), "{values:?}");
    }
    let collected = Key::try_collect(values_of(&["a", "", "é"]));
    assert_eq!(collected, Some(Key::new(["a", "", "é"])));
    let missing = [Some(Cow::Borrowed("a")), None, Some(Cow::Borrowed("c"))];
    assert_eq!(Key::try_collect(missing.into_iter()), None);
    // The scratch buffer is reset: a failed key leaves nothing for the next one.
    assert_eq!(Key::try_collect(values_of(&["z"])), Some(Key::new(["z"])));
    // Values never run into each other.
    assert_ne!(Key::new(["a", "b"]), Key::new(["ab"]));
    assert_ne!(Key::new(["a", ""]), Key::new(["a"]));
    assert_ne!(Key::new([""]), Key::new([] as [&str; 0]));
}

#[test]
fn key_serde_round_trip() {
    let key = Key::new(["a", "b"]);
    let json = serde_json::to_string(&key).expect("serializes");
    assert_eq!(json, r#"["a","b"]"#);
    let back: Key = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(back, key);
}

proptest::proptest! {
    #![proptest_config(crate::test_seed::config())]
    /// Ordering keys on `sort_prefix`, then on the key, is the key's own order, whatever
    /// the values (short, long, sharing 16-byte prefixes, holding NUL).
    #[test]
    fn the_sort_prefix_keeps_the_keys_order(
        a in proptest::collection::vec("[\\x00ab\\u{e9}]{0,10}", 0..4),
        b in proptest::collection::vec("[\\x00ab\\u{e9}]{0,10}", 0..4),
    ) {
        let (a, b) = (Key::new(&a), Key::new(&b));
        let by_prefix = a.sort_prefix().cmp(&b.sort_prefix()).then_with(|| a.cmp(&b));
        proptest::prop_assert_eq!(by_prefix, a.cmp(&b));
    }
}

proptest::proptest! {
    #![proptest_config(crate::test_seed::config())]
    /// The hash a key carries, its order and its raw values are its packed form's, however
    /// it was built (values, packed bytes, the decoder's scratch buffer): a key hashed or
    /// ordered by anything else would be two keys in one table, or none.
    #[test]
    fn a_key_carries_its_packed_forms_hash_order_and_values(
        a in proptest::collection::vec("[\\x00ab\\u{e9}]{0,10}", 0..4),
        b in proptest::collection::vec("[\\x00ab\\u{e9}]{0,10}", 0..4),
    ) {
        let ka = Key::new(&a);
        let kb = Key::new(&b);
        let packed = Key::from_bytes(ka.as_bytes()).expect("a key's packed form");
        let collected = Key::try_collect(values_of(&a.iter().map(String::as_str).collect::<Vec<_>>()))
            .expect("every value given");
        for k in [&packed, &collected] {
            proptest::prop_assert_eq!(k, &ka);
            proptest::prop_assert_eq!(k.hash64(), ka.hash64());
            proptest::prop_assert_eq!(k.as_bytes(), ka.as_bytes());
        }
        proptest::prop_assert_eq!(ka.hash64(), Key::hash_packed(ka.as_bytes()));
        proptest::prop_assert_eq!(ka.cmp(&kb), ka.as_bytes().cmp(kb.as_bytes()));
        proptest::prop_assert_eq!(ka == kb, a == b);
        let raw: Vec<&[u8]> = ka.raw_values().collect();
        let text: Vec<&[u8]> = ka.values().map(str::as_bytes).collect();
        proptest::prop_assert_eq!(raw, text);
    }
}
