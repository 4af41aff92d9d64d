//! Environment overrides: `GAP_AUDITOR__SECTION__KEY=value` set into the raw tree before
//! it is deserialized (see the module docs of [`crate::config`]).

use config::{Map, Value as CValue, ValueKind};

use super::{ConfigError, ENV_PREFIX, err};

/// Largest array index accepted in an environment override (`AUDITS__<n>__...`).
const MAX_ENV_INDEX: usize = 10_000;

pub(super) fn has_env_prefix(name: &str) -> bool {
    name.len() >= ENV_PREFIX.len()
        && name.is_char_boundary(ENV_PREFIX.len())
        && name[..ENV_PREFIX.len()].eq_ignore_ascii_case(ENV_PREFIX)
}

/// Applies `GAP_AUDITOR__A__B__0__C=value` overrides (see the module docs).
pub(super) fn apply_env<I>(tree: &mut Map<String, CValue>, env: I) -> Result<(), ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| has_env_prefix(name))
        .collect();
    vars.sort();
    let mut root = CValue::new(None, ValueKind::Table(std::mem::take(tree)));
    let result = vars.into_iter().try_for_each(|(name, value)| {
        let rest = &name[ENV_PREFIX.len()..];
        let mut segments: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        if segments.iter().any(|s| s.is_empty()) {
            return err(
                name.as_str(),
                "empty key segment: separate keys with exactly `__`",
            );
        }
        if segments.len() >= 3
            && segments[0] == "kafka"
            && (segments[1] == "properties" || segments[1] == "property_files")
        {
            let property = segments[2..].join(".").replace('_', ".");
            segments.truncate(2);
            segments.push(property);
        }
        set_path(&mut root, &segments, 0, value, &name)
    });
    if let ValueKind::Table(t) = root.kind {
        *tree = t;
    }
    result
}

fn set_path(
    node: &mut CValue,
    segments: &[String],
    depth: usize,
    value: String,
    var: &str,
) -> Result<(), ConfigError> {
    let Some(segment) = segments.get(depth) else {
        *node = CValue::new(None, ValueKind::String(value));
        return Ok(());
    };
    if matches!(node.kind, ValueKind::Nil) {
        node.kind = if segment.parse::<usize>().is_ok() {
            ValueKind::Array(Vec::new())
        } else {
            ValueKind::Table(Map::new())
        };
    }
    let here = segments[..depth].join(".");
    match &mut node.kind {
        ValueKind::Table(map) => {
            let child = map
                .entry(segment.clone())
                .or_insert_with(|| CValue::new(None, ValueKind::Nil));
            set_path(child, segments, depth + 1, value, var)
        }
        ValueKind::Array(items) => {
            let Ok(index) = segment.parse::<usize>() else {
                return err(
                    var,
                    format!("`{here}` is a list: the next segment must be an index, e.g. `__0__`"),
                );
            };
            if index > MAX_ENV_INDEX {
                return err(var, format!("index {index} is too large"));
            }
            while items.len() <= index {
                items.push(CValue::new(None, ValueKind::Nil));
            }
            set_path(&mut items[index], segments, depth + 1, value, var)
        }
        _ => err(
            var,
            format!("`{here}` is a single value, not a section: it has no key `{segment}`"),
        ),
    }
}
