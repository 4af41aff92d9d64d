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
